"""configs/sweeps/*.yaml: each study's Hydra multirun grid as a wandb sweep whose runs compose with Hydra."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("study_*.yaml"))
SWEEPS = sorted(p.stem for p in (ROOT / "configs" / "sweeps").glob("*.yaml"))


def _compose(overrides, return_hydra_config=False):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=return_hydra_config)


def study_grid(study: str) -> dict[str, list]:
    """The study's ``hydra.sweeper.params``, each comma-separated value read as YAML (``0.25`` a float)."""
    params = _compose([f"experiment={study}", "output_dir=x"], return_hydra_config=True).hydra.sweeper.params
    return {key: [yaml.safe_load(v) for v in str(values).split(",")] for key, values in params.items()}


def load_sweep(study: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / "sweeps" / f"{study}.yaml").read_text())


def agent_command(sweep: dict, values: dict) -> list[str]:
    """The command a ``wandb agent`` runs for one combination, built by wandb's own code as the agent does."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

    macros = create_sweep_command_args({"args": {k: {"value": v} for k, v in values.items()}})
    macros |= {"env": ["/usr/bin/env"], "interpreter": ["python"], "program": [sweep["program"]]}
    command = []
    for chunk in create_sweep_command(list(sweep["command"])):
        chunk = str(chunk)
        is_macro = chunk.startswith("${") and chunk.endswith("}")
        command += macros.get(chunk[2:-1]) or [] if is_macro else [chunk]
    return command


def test_every_study_has_a_sweep():
    assert SWEEPS == STUDIES and len(STUDIES) == 6


@pytest.mark.parametrize("study", STUDIES)
def test_sweep_grid_equals_the_hydra_multirun_grid(study):
    sweep = load_sweep(study)
    assert (sweep["program"], sweep["method"], sweep["project"]) == ("train.py", "grid", "glmrag")
    assert (ROOT / sweep["program"]).is_file()
    space = {key: spec["values"] for key, spec in sweep["parameters"].items()}
    assert space == study_grid(study)
    assert list(space) == list(study_grid(study))  # same order: the agent's overrides read like the multirun's
    assert sweep["command"][:3] == ["${env}", "${interpreter}", "${program}"]
    assert sweep["command"][-1] == "${args_no_hyphens}" and f"experiment={study}" in sweep["command"]


@pytest.mark.parametrize("study", STUDIES)
def test_an_agent_command_composes_into_the_study_run(study):
    sweep = load_sweep(study)
    grid = list(itertools.product(*(spec["values"] for spec in sweep["parameters"].values())))
    values = dict(zip(sweep["parameters"], grid[-1], strict=True))  # the last combination
    command = agent_command(sweep, values)
    assert command[:3] == ["/usr/bin/env", "python", "train.py"]
    overrides = command[3:]
    assert overrides[-len(values) :] == [f"{k}={v}" for k, v in values.items()]  # key=value, no hyphens
    cfg = _compose([*overrides, "output_dir=x"])
    assert cfg.study == study.removeprefix("study_") and cfg.results_dir == f"results/{cfg.study}"
    assert set(cfg.logger) == {"csv", "wandb"} and cfg.logger.wandb.project == sweep["project"]
    for key, value in values.items():
        if key.lstrip("+").split("/")[0] == "system":  # a config group: the system's experiment sets the family
            assert cfg.family.startswith(value.split("_t")[0])
        elif key == "data":
            assert cfg.data.name == value
        else:
            assert OmegaConf.select(cfg, key) == value
    # the run is the multirun's run with the same values, up to the logger
    multirun = _compose([f"experiment={study}", *(f"{k}={v}" for k, v in values.items()), "output_dir=x"])
    cfg.logger = multirun.logger
    assert OmegaConf.to_container(cfg) == OmegaConf.to_container(multirun)


def test_the_data_scaling_sweep_passes_fractions_as_numbers():
    sweep = load_sweep("study_data_scaling")
    command = agent_command(sweep, {"+system": "glm_rag", "datamodule.train_fraction": 0.25})
    assert command[-2:] == ["+system=glm_rag", "datamodule.train_fraction=0.25"]
    cfg = _compose([*command[3:], "output_dir=x"])
    assert cfg.datamodule.train_fraction == 0.25 and cfg.run_name == "glm_rag-f0.25-musique100"
    assert cfg.datamodule._target_.endswith("SubgraphDataModule")
