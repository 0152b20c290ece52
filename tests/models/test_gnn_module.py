"""GNNRetrieverModule on musique100 with a tiny GNN: learning, checkpoints, KG-completion pretraining."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from glmrag.datamodules.gnn_datamodule import KGQADataModule
from glmrag.models.gnn_module import GNNRetrieverModule

TINY = {"gnn": {"hidden_channels": 16, "num_layers": 2}}

pytestmark = [
    pytest.mark.usefixtures("glmrag_cache"),  # GLMRAG_CACHE_DIR set for the whole module
    pytest.mark.integration,  # trains on musique100: its full index with entity embeddings takes minutes
]


@pytest.fixture(scope="module")
def hydra_index(index_config):
    """A factory of the index config as Hydra hands it over: a DictConfig.

    The checkpoint must still hold plain values only.
    """

    def make() -> DictConfig:
        return OmegaConf.create(index_config())

    return make


@pytest.fixture(scope="module")
def fitted(hydra_index, cpu_trainer, tmp_path_factory):
    """Validate an untrained tiny GNN, train it 2 epochs on 24 musique100 questions, validate again.

    The learning rate is 10x GLM-RAG's 5e-4 so that 12 steps make a clear difference.
    """
    L.seed_everything(0)
    dm = KGQADataModule("musique100", index=hydra_index(), limit=24, batch_size=4)
    fast = partial(torch.optim.AdamW, lr=5e-3)
    evaluation = OmegaConf.create({"ks": [1, 2, 5, 10]})  # a DictConfig, as Hydra hands it over
    model = GNNRetrieverModule(**TINY, optimizer=fast, evaluation=evaluation, kgs=dm)
    trainer = cpu_trainer(max_epochs=2, default_root_dir=tmp_path_factory.mktemp("fit"))
    before = trainer.validate(model, datamodule=dm, verbose=False)[0]
    trainer.fit(model, datamodule=dm)
    logged = dict(trainer.callback_metrics)
    after = trainer.validate(model, datamodule=dm, verbose=False)[0]
    return SimpleNamespace(dm=dm, model=model, trainer=trainer, before=before, after=after, logged=logged)


def test_training_improves_validation_recall(fitted):
    before, after = fitted.before, fitted.after
    print(f"untrained {before}\ntrained {after}")
    assert after["val/recall@2"] >= before["val/recall@2"] + 0.1
    assert after["val/recall@5"] > before["val/recall@5"]
    assert after["val/loss"] < before["val/loss"]


def test_logs_template_keys(fitted):
    keys = {"train/loss", "val/loss", "val/recall@2", "val/recall@5", "val/mrr", "val/recall@2_best"}
    assert keys <= fitted.logged.keys()
    assert fitted.logged["val/recall@2_best"] >= fitted.logged["val/recall@2"]


def test_load_from_checkpoint_round_trip(fitted, tmp_path):
    path = tmp_path / "model.ckpt"
    fitted.trainer.save_checkpoint(path, weights_only=False)
    torch.load(path, weights_only=True)  # plain values only, datamodule hyper-parameters included
    loaded = GNNRetrieverModule.load_from_checkpoint(path)  # Lightning's default: weights_only loading
    assert loaded.hparams == fitted.model.hparams and loaded.hparams.evaluation["ks"] == (1, 2, 5, 10)
    batch = next(iter(fitted.dm.val_dataloader()))
    graph = fitted.dm.graph(batch["kg"])
    fitted.model.eval()
    with torch.no_grad():
        expected = fitted.model(graph, batch["question_emb"], batch["seed_weight"])
        got = loaded.eval()(graph, batch["question_emb"], batch["seed_weight"])
    assert torch.equal(got, expected)
    assert torch.equal(loaded.val_best.max_value, fitted.model.val_best.max_value)  # persistent: resumes keep it


def test_kgc_pretraining_then_finetuning_starts_from_its_weights(hydra_index, cpu_trainer, tmp_path):
    L.seed_everything(0)
    kgc_dm = KGQADataModule("musique100", index=hydra_index(), limit=4, batch_size=4, task="kgc")
    pretrain = GNNRetrieverModule(**TINY, stage="kgc", kgc={"num_negatives": 32}, kgs=kgc_dm)
    trainer = cpu_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, default_root_dir=tmp_path / "kgc")
    trainer.fit(pretrain, datamodule=kgc_dm)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    path = tmp_path / "kgc.ckpt"
    trainer.save_checkpoint(path, weights_only=False)

    qa_dm = KGQADataModule("musique100", index=hydra_index(), limit=4, batch_size=4)
    frozen = partial(torch.optim.AdamW, lr=0.0)  # a step that changes nothing: weights stay as loaded
    finetune = GNNRetrieverModule(**TINY, init_from=str(path), optimizer=frozen, kgs=qa_dm)
    pretrained = pretrain.gnn.state_dict()
    assert not torch.equal(finetune.gnn.readout[0].weight, pretrained["readout.0.weight"])
    trainer = cpu_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, default_root_dir=tmp_path / "qa")
    trainer.fit(finetune, datamodule=qa_dm)
    for name, value in finetune.gnn.state_dict().items():
        assert torch.equal(value, pretrained[name]), name


def test_stage_must_match_the_datamodule_task(hydra_index, cpu_trainer, tmp_path):
    dm = KGQADataModule("musique100", index=hydra_index(), limit=4, task="kgc")
    with pytest.raises(ValueError, match="model.stage='qa' but datamodule.task='kgc'"):
        cpu_trainer(max_epochs=1, default_root_dir=tmp_path).fit(GNNRetrieverModule(**TINY, kgs=dm), datamodule=dm)
