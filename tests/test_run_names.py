"""Command-line overrides that change what a run measures change its name (and so its folders)."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

import glmrag.jobs.config_path  # noqa: F401  (registers the resolver, as train.py's import of glmrag does)
from glmrag.jobs.config_path import run_suffix

ROOT = Path(__file__).resolve().parents[1]


def run_name(config: str, overrides: list[str]) -> str:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name=config, overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # what @hydra.main does before it names the run folder
    try:
        return cfg.run_name
    finally:
        HydraConfig.instance().cfg = None


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        (["experiment=demo"], "gfm_rag_plus_demo-musique100"),
        (["experiment=demo", "model.hidden_channels=32"], "gfm_rag_plus_demo-musique100-hidden_channels=32"),
        (
            ["experiment=demo", "data.limit=20", "logger=[csv,wandb]", "output_dir=/tmp/x"],
            "gfm_rag_plus_demo-musique100-limit=20",
        ),
        (["experiment=demo", "trainer=cpu", "study=mine"], "gfm_rag_plus_demo-musique100"),
    ],
)
def test_train_run_names_show_what_differs(overrides, name):
    assert run_name("train", overrides) == name


def test_eval_run_names_and_folder_safe_values():
    assert run_name("eval", ["data=toy", "retriever=[ppr]"]) == "eval-toy-retriever=ppr"
    assert run_suffix(["+model.t5=/models/t5 small", "data.split=test"]) == "-t5=_models_t5_small,split=test"
    assert run_suffix([]) == ""
