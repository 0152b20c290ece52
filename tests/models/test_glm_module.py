"""GLMRetrieverModule on musique100 with a tiny random T5: learning, the masked loss, checkpoints, resume."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from glmrag.datamodules.subgraph_data import SubgraphDataModule
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.models.glm_module import GLMRetrieverModule
from glmrag.models.losses import gfm_rag_loss
from glmrag.nn.glm_retriever import GLMInputs

T5_TINY = {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 4, "d_kv": 8, "dropout_rate": 0.0}
MAX_TRIPLETS = 60

pytestmark = pytest.mark.usefixtures("glmrag_cache")


def make_dm(index_config, cache_dir, **overrides) -> SubgraphDataModule:
    args = {
        "datasets": ["musique100"],
        "index": index_config(embed_model=None),  # no entity embeddings: the index builds in seconds
        "limit": 24,
        "batch_size": 4,
        "num_workers": 0,  # the default (from the cores) would start worker processes in every test
        "embed_model": DEFAULT_MODEL,
        "cache_dir": str(cache_dir),
        "tokenizer": DEFAULT_MODEL,
        "subgraph": {"max_triplets": MAX_TRIPLETS},
    }
    return SubgraphDataModule(**(args | overrides))


def make_model(**overrides) -> GLMRetrieverModule:
    torch.manual_seed(0)
    args = {
        "glm": {"encoder_config": T5_TINY, "tokenizer": DEFAULT_MODEL},
        "subgraph": {"max_triplets": MAX_TRIPLETS},
        "lr": {"head": 3e-3, "backbone": 3e-3},
        "optimizer": partial(torch.optim.AdamW),
    }
    return GLMRetrieverModule(**(args | overrides))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("subgraphs")


@pytest.fixture(scope="module")
def fitted(index_config, cpu_trainer, cache, tmp_path_factory):
    """Validate an untrained tiny GLM on its training questions, train it 5 epochs on them, validate again.

    Validating on the training split measures whether the model learns at all (14 questions generalise to
    nothing); the learning rate is 6x GLM-RAG's head lr so that 20 steps make a difference.
    """
    return fit_on_training_questions(make_model, index_config, cpu_trainer, cache, tmp_path_factory)


def fit_on_training_questions(make, index_config, cpu_trainer, cache, tmp_path_factory) -> SimpleNamespace:
    """Seed, build ``make()``, validate it on its training questions, train 5 epochs, validate again."""
    L.seed_everything(0)
    dm = make_dm(index_config, cache, val_split="train")
    model = make(kgs=dm)
    trainer = cpu_trainer(max_epochs=5, default_root_dir=tmp_path_factory.mktemp("fit"))
    before = trainer.validate(model, datamodule=dm, verbose=False)[0]
    trainer.fit(model, datamodule=dm)
    after = trainer.validate(model, datamodule=dm, verbose=False)[0]
    return SimpleNamespace(dm=dm, model=model, trainer=trainer, before=before, after=after)


@pytest.mark.integration  # trains a GLM on musique100
def test_training_fits_the_training_questions(fitted):
    before, after = fitted.before, fitted.after
    print(f"untrained {before}\ntrained {after}")
    assert after["val/loss"] < before["val/loss"] - 0.2
    assert after["val/recall@2"] >= before["val/recall@2"] + 0.1
    assert set(fitted.after) >= {"val/loss", "val/recall@2", "val/recall@5", "val/mrr"}


@pytest.mark.integration  # trains a GLM on musique100
def test_loss_is_normalised_over_the_subgraphs_entity_nodes_only(fitted):
    """Padding the batch with more (unscored) node columns changes neither the logits nor the loss."""
    batch = next(iter(fitted.dm.val_dataloader()))
    model = fitted.model.eval()
    with torch.no_grad():
        loss, logits = model.model_step(batch)
        expected = gfm_rag_loss(logits, batch["target"], batch["node_mask"], bce_weight=0.44, listce_weight=0.56)
        torch.testing.assert_close(loss, expected)
        wider = dict(batch)
        pad = torch.full((len(batch["kg"]), 7), -1, dtype=torch.long)
        wider["entity_of_node"] = torch.cat([batch["entity_of_node"], pad], dim=1)
        wider["node_mask"] = torch.cat([batch["node_mask"], pad >= 0], dim=1)
        wider["target"] = torch.cat([batch["target"], torch.ones(pad.shape)], dim=1)  # targets there are ignored
        wider_loss, wider_logits = model.model_step(wider)
    torch.testing.assert_close(wider_logits[:, : logits.shape[1]], logits)
    torch.testing.assert_close(wider_loss, loss)


def test_two_learning_rates_cover_every_parameter_once():
    model = make_model(lr={"head": 5e-4, "backbone": 1e-4, "buckets": "head"})  # default: test_glm_reference_rules
    groups = model.configure_optimizers()["optimizer"].param_groups
    assert [(g["name"], g["lr"]) for g in groups] == [("backbone", 1e-4), ("head", 5e-4)]
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    head = {id(p) for p in groups[1]["params"]}
    assert {id(p) for p in model.net.scorer.parameters()} <= head and id(model.net.encoder.extra_bias) in head


@pytest.mark.integration  # trains a GLM on musique100
def test_load_from_checkpoint_gives_the_same_logits(fitted, tmp_path):
    path = tmp_path / "glm.ckpt"
    fitted.trainer.save_checkpoint(path)
    loaded = GLMRetrieverModule.load_from_checkpoint(path).eval()
    assert loaded.hparams == fitted.model.hparams and loaded.hparams.evaluation["ks"] == (1, 2, 5, 10)
    batch = next(iter(fitted.dm.val_dataloader()))
    inputs = GLMInputs.from_batch(batch)
    with torch.no_grad():
        torch.testing.assert_close(loaded(inputs), fitted.model.eval()(inputs))


def test_datamodule_with_other_subgraphs_is_refused(index_config, cpu_trainer, cache, tmp_path):
    dm = make_dm(index_config, cache, subgraph={"max_triplets": 30})
    trainer = cpu_trainer(max_epochs=1, default_root_dir=tmp_path)
    with pytest.raises(ValueError, match=r"max_triplets=30 but the model 60.*subgraph=model.hparams.subgraph"):
        trainer.validate(make_model(kgs=dm), datamodule=dm, verbose=False)


@pytest.mark.integration  # trains a GLM on musique100
def test_resuming_from_last_checkpoint_matches_an_uninterrupted_run(index_config, cpu_trainer, cache, tmp_path):
    """Epoch 2 after a restart streams the same shuffled batches and ends with the same weights."""

    def run(max_epochs: int, root, ckpt_path=None) -> GLMRetrieverModule:
        L.seed_everything(0)
        dm = make_dm(index_config, cache, limit=12, num_workers=1)  # a worker prefetches before set_epoch
        model = make_model(kgs=dm)
        trainer = cpu_trainer(max_epochs=max_epochs, default_root_dir=root, limit_val_batches=0)
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
        trainer.save_checkpoint(root / "last.ckpt")
        return model

    straight = run(2, tmp_path / "straight")
    run(1, tmp_path / "first")
    resumed = run(2, tmp_path / "second", ckpt_path=tmp_path / "first" / "last.ckpt")
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
