"""GLMRetrieverModule with a prior (glmrag/nn/prior.py) on musique100 with a tiny random T5: untrained it ranks as
the PPR + dense fusion computed from the PPR retriever, training moves it, and the checkpoint retriever ranks as
its validation did."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_glm_module import make_dm, make_model

from glmrag.data.registry import load_dataset
from glmrag.index.embed import Embedder
from glmrag.index.ranking import top_k_stable
from glmrag.nn.prior import MASS_FLOOR
from glmrag.retrievers.checkpoint import CheckpointRetriever
from glmrag.retrievers.ppr import PPRRetriever

PRIOR = {"kind": "ppr", "dense_weight": 10.0}
TOP_K = 10

pytestmark = [pytest.mark.usefixtures("glmrag_cache"), pytest.mark.integration]  # trains a GLM on musique100


def make_prior_model(**overrides):
    return make_model(prior=PRIOR, loss={"passage_weight": 1.0}, **overrides)


@pytest.fixture(scope="module")
def connected(index_config, cpu_trainer, tmp_path_factory):
    """An untrained GLM with a prior over its DataModule's KGs, validated once on its training questions (which
    sets the DataModule up)."""
    dm = make_dm(index_config, tmp_path_factory.mktemp("subgraphs"), val_split="train")
    model = make_prior_model(kgs=dm)
    trainer = cpu_trainer(max_epochs=4, default_root_dir=tmp_path_factory.mktemp("fit"))
    before = trainer.validate(model, datamodule=dm, verbose=False)[0]
    return dm, model, trainer, before


def val_rankings(model, dm) -> dict[str, list[str]]:
    """Question id -> the module's top passages, as its validation ranks them."""
    out = {}
    model.eval()
    with torch.no_grad():
        for batch in dm.val_dataloader():
            _, logits = model.model_step(batch)
            for ranking in model.rank(batch, TOP_K, logits):
                out[ranking.question_id] = ranking.passage_ids
    return out


def fusion_rankings(dm, question_ids) -> dict[str, list[str]]:
    """The PPR + dense fusion from the PPR retriever's probabilities: ``log(mass) + 10 cos(q, p)``."""
    index, full = dm.index("musique100"), load_dataset("musique100")
    by_id = {q.id: q for q in full.qa}
    questions = [by_id[q] for q in question_ids]
    probs = PPRRetriever().entity_scores(questions, index)  # (Q, E)
    mass = index.passage_entities @ probs.T  # (P, Q)
    question_emb = Embedder(dm.hparams.embed_model).encode([q.question for q in questions])  # (Q, d)
    passage_emb = dm.passage_embeddings("musique100").numpy()  # (P, d)
    scores = np.log(mass.T + MASS_FLOOR) + 10.0 * question_emb @ passage_emb.T  # (Q, P)
    positions, _ = top_k_stable(scores, TOP_K)
    return {q: [index.passage_ids[p] for p in row] for q, row in zip(question_ids, positions, strict=True)}


def test_the_untrained_glm_with_a_prior_ranks_as_the_ppr_dense_fusion(connected):
    dm, model, _, _ = connected
    got = val_rankings(model, dm)
    expected = fusion_rankings(dm, list(got))
    assert len(got) >= 20
    same = sum(got[q][:TOP_K] == expected[q] for q in got)
    assert same == len(got), f"{len(got) - same} of {len(got)} questions rank otherwise than the fusion"


def test_the_loss_is_the_mean_over_real_rows(connected):
    """A batch's loss is the mean of its rows' losses (rows of one KG, averaged as the GNN's are)."""
    dm, model, _, _ = connected
    batch = next(iter(dm.val_dataloader()))
    model.eval()
    with torch.no_grad():
        loss, logits = model.model_step(batch)
        singles = []
        for row in range(len(batch["kg"])):
            one = {k: v[row : row + 1] for k, v in batch.items()}
            singles.append(model.prior_loss(one, logits[row : row + 1]))
    torch.testing.assert_close(loss, torch.stack(singles).mean())
    assert loss > 0


def test_training_moves_the_glm_off_its_prior(connected, index_config, cpu_trainer, tmp_path):
    dm, model, trainer, before = connected
    trained = make_prior_model(kgs=dm)
    rankings_before = val_rankings(model, dm)
    trainer = cpu_trainer(max_epochs=4, default_root_dir=tmp_path)
    trainer.validate(trained, datamodule=dm, verbose=False)  # as train.py does: its prior KG built in inference mode
    trainer.fit(trained, datamodule=dm)
    after = trainer.validate(trained, datamodule=dm, verbose=False)[0]
    print(f"untrained {before}\ntrained {after}")
    assert trained.net.scorer[-1].weight.abs().sum() > 0  # the zero-initialised last layer learned
    assert after["val/loss"] < before["val/loss"] - 0.05
    assert val_rankings(trained, dm) != rankings_before

    path = tmp_path / "glm_prior.ckpt"
    trainer.save_checkpoint(path)
    retriever = CheckpointRetriever(str(path))
    index, full = dm.index("musique100"), load_dataset("musique100")
    by_id = {q.id: q for q in full.qa}
    validation = val_rankings(trained, dm)
    questions = [by_id[q] for q in validation]
    rankings = retriever.retrieve(questions, index, full.corpus, top_k=TOP_K)
    for question, ranking in zip(questions, rankings, strict=True):
        assert ranking.passage_ids == validation[question.id]
