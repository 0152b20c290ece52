"""The arguments both DataModules share (QuestionSettings): flat in the config, flat in the hyper-parameters."""

from pathlib import Path

import hydra
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from glmrag.datamodules.gnn_datamodule import KGQADataModule
from glmrag.datamodules.subgraph_data import SubgraphDataModule

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("root", "train_split", "val_split", "test_split", "limit", "train_fraction", "seed", "embed_model")
"""The fields of QuestionSettings, written out: a field added or dropped there must be reflected here."""


def _datamodule_config(experiment: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["output_dir=x", f"experiment={experiment}", "datamodule.seed=7"])
    return cfg.datamodule


@pytest.mark.parametrize("experiment", ["demo", "glm_demo"])
def test_every_config_key_reaches_the_hyperparameters(experiment):
    node = _datamodule_config(experiment)
    dm = hydra.utils.instantiate(node)
    config = OmegaConf.to_container(node, resolve=True)
    config.pop("_target_")
    assert set(SHARED) <= set(config)
    for key, value in config.items():
        assert dm.hparams[key] == value, key
    assert dm.hparams.seed == 7 and isinstance(dm.hparams.train_fraction, float)


@pytest.mark.parametrize("cls", [KGQADataModule, SubgraphDataModule])
def test_defaults_and_a_misspelled_key(cls):
    dm = cls("musique100", {"extractor": "openie"}, limit=5)
    expected = {"root": None, "train_split": "train", "val_split": "validation", "test_split": "test"}
    expected |= {"limit": 5, "train_fraction": 1.0, "seed": 0, "embed_model": "offline:all-MiniLM-L6-v2"}
    assert {k: dm.hparams[k] for k in SHARED} == expected
    assert dm.hparams.datasets == ["musique100"]
    with pytest.raises(TypeError, match=r"\['limt'\].*QuestionSettings \(root, train_split"):
        cls("musique100", {}, limt=5)


def test_the_shared_base_is_abstract_and_a_subclass_must_build_its_loaders():
    from glmrag.datamodules.kg_datamodule import KGDataModule

    with pytest.raises(TypeError, match="abstract method _loader"):
        KGDataModule(datasets=["musique100"], index={})

    class NoLoaders(KGDataModule):
        pass

    with pytest.raises(TypeError, match="abstract method _loader"):
        NoLoaders(datasets=["musique100"], index={})
    assert not getattr(KGQADataModule._loader, "__isabstractmethod__", False)
    assert not getattr(SubgraphDataModule._loader, "__isabstractmethod__", False)
