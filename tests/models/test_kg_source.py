"""A module reads its batch and the KG source it is built with (glmrag/datamodules/kg_source.py): its steps run on a
hand-built batch of a tiny KG with no Trainer and nothing patched; the source is checked, and no checkpoint holds it.

Untrained with a PPR prior, both modules score exactly the prior (their corrections start at zero), so the expected
losses and rankings come from the PPR retriever on the same index, not from the modules.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest
import torch
from stand_ins import HashEncoder, link_questions
from test_glm_module import T5_TINY
from torch.utils.data import DataLoader

from glmrag.datamodules.glm_inputs import GLMCollate, load_tokenizer, question_record
from glmrag.datamodules.kg_source import GraphSource, StaticKGs
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.ranking import top_k_stable
from glmrag.index.ranking_metrics import retrieval_metrics
from glmrag.models.glm_module import GLMRetrieverModule
from glmrag.models.gnn_module import GNNRetrieverModule
from glmrag.models.losses import gfm_rag_loss, passage_list_ce
from glmrag.nn.graph_inputs import graph_inputs, seed_weights
from glmrag.nn.prior import LOG_FLOOR, MASS_FLOOR
from glmrag.retrievers.ppr import PPRRetriever

DIM = 16
DENSE = 10.0
PRIOR = {"kind": "ppr", "dense_weight": DENSE}
GNN = {"hidden_channels": 8, "num_layers": 2, "question_dim": DIM, "relation_dim": DIM, "node_dim": DIM}
SEED_SETS = [[0], [3, 17], [7, 8, 9]]
KG = "b"  # the batch's KG; the source also holds "a", of another size


@pytest.fixture
def kgs(random_graph):
    """A :class:`StaticKGs` of two random KGs ``a`` and ``b`` (GNN inputs and passage embeddings by a hash
    encoder), and the questions of ``b``, each with two gold passages."""
    encoder = HashEncoder(DIM)
    indexes = {"a": random_graph(60, 200, seed=1), KG: random_graph(48, 150, seed=2)}
    graphs = {kg: graph_inputs(index, encoder, node_features=False) for kg, index in indexes.items()}
    passage_emb = {kg: torch.from_numpy(encoder.encode(index.passage_ids)) for kg, index in indexes.items()}
    index = indexes[KG]
    questions = [
        dataclasses.replace(q, supporting=(index.passage_ids[i], index.passage_ids[i + 4]))
        for i, q in enumerate(link_questions(index, SEED_SETS))
    ]
    return StaticKGs(indexes, graphs, passage_emb), questions


def prior_scores(index, questions, question_emb, passage_emb) -> tuple[torch.Tensor, torch.Tensor]:
    """The untrained prior's scores from the PPR retriever (glmrag/nn/prior.py's formulas written out): each
    entity's ``log p(e | q)`` (B, E) and each passage's ``log(mass) + b cos(q, p)`` (B, P)."""
    probs = torch.from_numpy(PPRRetriever().entity_scores(questions, index)).float()  # (B, E)
    mentions = torch.from_numpy(index.passage_entities.toarray()).float()  # (P, E)
    passages = torch.log(probs @ mentions.T + MASS_FLOOR) + DENSE * question_emb @ passage_emb.T  # (B, P)
    return probs.clamp_min(LOG_FLOOR).log(), passages


def gold_mask(index, questions) -> torch.Tensor:
    """Shapes: -> (B, P) bool, True at each question's gold passages."""
    out = torch.zeros(len(questions), index.num_passages, dtype=torch.bool)
    for row, q in enumerate(questions):
        out[row, [index.passage_ids.index(p) for p in q.supporting]] = True
    return out


def expected_recall(index, questions, passage_scores: torch.Tensor, k: int = 2) -> float:
    """Mean recall@k of the passages ranked by ``passage_scores``."""
    positions, _ = top_k_stable(passage_scores.numpy(), k)
    ranked = [[index.passage_ids[p] for p in row] for row in positions]
    recalls = [retrieval_metrics(r, q.supporting, [k])[f"recall@{k}"] for r, q in zip(ranked, questions, strict=True)]
    return float(np.mean(recalls))


def gnn_batch(kgs: StaticKGs, questions) -> dict:
    """A batch as :class:`~glmrag.datamodules.gnn_batches.QACollate` makes it: the gold passages' entities."""
    index, ids = kgs.index(KG), [q.id for q in questions]
    target = torch.zeros(len(ids), index.num_entities)
    for row, q in enumerate(questions):
        target[row, index.entities_of_passages(list(q.supporting))] = 1.0
    return {
        "kg": KG,
        "question_ids": ids,
        "question_emb": torch.from_numpy(HashEncoder(DIM).encode([q.question for q in questions])),  # (B, d)
        "seed_weight": seed_weights(index, ids),  # (B, E)
        "target": target,
        "gold": [list(q.supporting) for q in questions],
        "real": torch.ones(len(ids), dtype=torch.bool),
    }


def gnn_module(kgs=None) -> GNNRetrieverModule:
    torch.manual_seed(0)
    return GNNRetrieverModule(gnn=GNN, prior=PRIOR, loss={"passage_weight": 1.0}, kgs=kgs)


def glm_module(kgs=None, **overrides) -> GLMRetrieverModule:
    torch.manual_seed(0)
    glm = {"encoder_config": T5_TINY, "tokenizer": DEFAULT_MODEL, "question_dim": DIM}
    args = {"subgraph": {"max_triplets": 30}, "prior": PRIOR, "loss": {"passage_weight": 1.0}} | overrides
    return GLMRetrieverModule(glm=glm, kgs=kgs, **args)


def glm_batch(model: GLMRetrieverModule, kgs: StaticKGs, questions) -> dict:
    """The questions' subgraph records collated as
    :class:`~glmrag.datamodules.subgraph_data.SubgraphDataModule` collates them."""
    settings, tokenizer = model.subgraph_settings(), load_tokenizer(DEFAULT_MODEL)
    question_emb = HashEncoder(DIM).encode([q.question for q in questions])  # (B, d)
    records = [
        question_record(kgs.index(KG), q, KG, tokenizer, settings, emb)
        for q, emb in zip(questions, question_emb, strict=True)
    ]
    return GLMCollate(settings.position_mode, position_conflict=settings.position_conflict)(records)


@pytest.mark.filterwarnings("ignore:You are trying to .self.log")  # no Trainer: Lightning logs nothing, says so
def test_a_gnn_module_steps_on_a_hand_built_batch(kgs):
    kgs, questions = kgs
    assert isinstance(kgs, GraphSource)  # a source either module reads
    model, batch = gnn_module(kgs), gnn_batch(kgs, questions)
    index = kgs.index(KG)
    entity, passage = prior_scores(index, questions, batch["question_emb"], kgs.passage_embeddings(KG))
    expected = gfm_rag_loss(entity, batch["target"], **model.loss_weights.entity_loss)
    expected = expected + passage_list_ce(passage, gold_mask(index, questions))

    loss = model.training_step(batch, 0)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    loss.backward()
    assert model.prior.dense_weight.grad is not None  # the source's passage embeddings entered the loss

    model.eval()
    with torch.no_grad():
        model.validation_step(batch, 0)
    torch.testing.assert_close(model.val_loss.compute(), expected.detach(), rtol=1e-4, atol=1e-5)
    assert model.val_metrics["recall@2"].compute().item() == pytest.approx(expected_recall(index, questions, passage))


@pytest.mark.filterwarnings("ignore:You are trying to .self.log")  # no Trainer: Lightning logs nothing, says so
def test_a_glm_module_steps_on_a_hand_built_batch(kgs):
    kgs, questions = kgs
    model = glm_module(kgs)
    batch = glm_batch(model, kgs, questions)
    index = kgs.index(KG)
    entity, passage = prior_scores(index, questions, batch["question_emb"], kgs.passage_embeddings(KG))
    node_logits = entity.gather(1, batch["entity_of_node"].clamp(min=0))  # (B, N): each entity node's log-prior
    expected = gfm_rag_loss(node_logits, batch["target"], batch["node_mask"], **model.loss_weights.entity_loss)
    expected = expected + passage_list_ce(passage, gold_mask(index, questions))
    assert batch["node_mask"].any() and batch["target"].any()

    loss = model.training_step(batch, 0)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    loss.backward()
    assert model.net.scorer[-1].weight.grad.abs().sum() > 0  # the GLM's correction learns from the prior's loss

    model.eval()
    with torch.no_grad():
        model.validation_step(batch, 0)
    torch.testing.assert_close(model.val_loss.compute(), expected.detach(), rtol=1e-4, atol=1e-5)
    assert model.val_metrics["recall@2"].compute().item() == pytest.approx(expected_recall(index, questions, passage))


@pytest.mark.parametrize("make", [gnn_module, glm_module], ids=["gnn", "glm"])
def test_a_module_without_kgs_says_how_to_give_them(make, kgs):
    kgs, questions = kgs
    model = make().eval()
    batch = gnn_batch(kgs, questions) if make is gnn_module else glm_batch(model, kgs, questions)
    name = type(model).__name__
    with torch.no_grad(), pytest.raises(RuntimeError, match=rf"{name} has no KGs to read: build it with kgs="):
        model.validation_step(batch, 0)


class IndexOnly:
    """A source with an index and nothing else."""

    def index(self, kg):
        raise AssertionError("setup reads no KG")


class NoGraphs(IndexOnly):
    def passage_embeddings(self, kg):
        raise AssertionError("setup reads no KG")


@pytest.mark.parametrize(
    ("make", "source", "lacks"), [(gnn_module, NoGraphs(), "graph"), (glm_module, IndexOnly(), "passage_embeddings")]
)
def test_a_source_without_a_method_the_module_reads_is_refused(make, source, lacks):
    model = make(source)
    name = type(model).__name__
    with pytest.raises(
        TypeError, match=rf"{name} reads .*\(kg\) of its kgs; {type(source).__name__} lacks {lacks}: give"
    ):
        model.setup("fit")


def test_a_glm_without_a_dense_term_reads_the_index_alone():
    """No prior, no passage embeddings: a source with ``index`` alone will do (the GPU throughput benchmark's
    synthetic DataModule has no more)."""
    glm_module(IndexOnly(), prior=None, loss={}).setup("fit")


def test_a_checkpoint_holds_no_kgs_and_load_from_checkpoint_takes_them(kgs, cpu_trainer, tmp_path):
    """Fit one step with no DataModule at all (the batch and the source are all the module reads), save, load."""
    kgs, questions = kgs
    model, batch = gnn_module(kgs), gnn_batch(kgs, questions)
    trainer = cpu_trainer(max_steps=1, default_root_dir=tmp_path, enable_checkpointing=False)
    trainer.fit(model, train_dataloaders=DataLoader([batch], batch_size=None))  # the batch as it is
    path = tmp_path / "gnn.ckpt"
    trainer.save_checkpoint(path)

    saved = torch.load(path, weights_only=True)  # nothing but tensors and plain values
    assert "kgs" not in saved["hyper_parameters"]
    assert not any("kgs" in key for key in saved["state_dict"])
    loaded = GNNRetrieverModule.load_from_checkpoint(path, kgs=kgs, weights_only=True).eval()
    assert loaded.kgs is kgs and "kgs" not in loaded.hparams
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.model_step(batch)[0], model.model_step(batch)[0])
    with pytest.raises(RuntimeError, match=r"load_from_checkpoint\(path, kgs=datamodule\)"):
        GNNRetrieverModule.load_from_checkpoint(path, weights_only=True).model_step(batch)


def test_a_copy_reads_the_same_kgs_and_a_pickle_carries_them(kgs):
    """``copy.deepcopy`` shares the source (a DataModule with its indexes and Trainer) and copies the weights;
    a pickle (as ddp_spawn sends the module to its processes) carries the source with the module."""
    kgs, questions = kgs
    model, batch = gnn_module(kgs).eval(), gnn_batch(kgs, questions)
    copied, unpickled = copy.deepcopy(model), pickle.loads(pickle.dumps(model))
    assert copied.kgs is kgs and copied.prior.weight is not model.prior.weight
    assert unpickled.kgs is not kgs and unpickled.kgs.index(KG).passage_ids == kgs.index(KG).passage_ids
    with torch.no_grad():
        expected = model.model_step(batch)[0]
        torch.testing.assert_close(copied.model_step(batch)[0], expected)
        torch.testing.assert_close(unpickled.model_step(batch)[0], expected)
