"""What the jobs share: composing a job config, the command-line overrides, the resolved config as YAML, and
the run name and config a checkpoint carries.

:func:`compose_config` is how the training job builds its evaluation (``configs/eval.yaml`` with values set),
so both jobs read one evaluation schema; :func:`hydra_overrides` and :func:`resolved_config_yaml` describe a run
for the results store (:mod:`glmrag.eval.store`); :class:`RunConfig` writes into every checkpoint the run name the
evaluation job labels it by (:func:`checkpoint_run_name`) and the resolved config a resume is checked against
(:func:`~glmrag.jobs.config_check.check_resume_config`); :func:`instantiate_datamodule` builds a job's DataModule.
"""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_class, instantiate
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf

from glmrag.jobs.config_path import config_dir


def compose_config(config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The job config ``eval`` / ``train`` with command-line style ``overrides``, as the scripts compose it.

    Also inside a running Hydra job (the training job composing its evaluation), whose Hydra state is put back.
    """
    from hydra import compose, initialize_config_dir

    running = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return compose(config_name=config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().hydra = running


def instantiate_datamodule(cfg: DictConfig) -> Any:
    """``cfg.datamodule`` instantiated. A DataModule that builds the model's subgraphs (it takes ``subgraph``)
    is given ``model.subgraph``: the one node of those settings, which no ``datamodule`` node repeats."""
    takes_subgraph = "subgraph" in inspect.signature(get_class(cfg.datamodule._target_)).parameters
    return instantiate(cfg.datamodule, **({"subgraph": cfg.model.subgraph} if takes_subgraph else {}))


def hydra_overrides() -> list[str]:
    """The command-line overrides of this Hydra job (a multirun job's include its swept values); [] outside Hydra."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def resolved_config_yaml(cfg: DictConfig) -> str:
    """``cfg`` without its ``hydra`` node, interpolations resolved, as YAML.

    Resolved through ``cfg`` itself, not a copy, so cached resolvers keep the values the run used
    (``${now:...}`` in ``checkpoint_dir`` is the time the run started, not the time of writing).
    """
    nodes = {key: cfg[key] for key in cfg if key != "hydra"}
    return OmegaConf.to_yaml(
        {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in nodes.items()}
    )


class RunConfig(Callback):
    """The training run's name and resolved config (:func:`resolved_config_yaml`), saved in every checkpoint it
    writes (under the state key ``RunConfig``)."""

    def __init__(self, run_name: str, config_yaml: str) -> None:
        self.run_name, self.config_yaml = run_name, config_yaml

    def state_dict(self) -> dict[str, Any]:
        return {"run_name": self.run_name, "config": self.config_yaml}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing: a resumed run keeps its own name and config (checked against it by
        :func:`~glmrag.jobs.config_check.check_resume_config`)."""


def run_state(ckpt_path: str | Path) -> dict[str, Any]:
    """:class:`RunConfig`'s state in a checkpoint; {} for a checkpoint without it (or no readable checkpoint)."""
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError):  # the retriever's loader names the problem
        return {}
    return dict(ckpt.get("callbacks", {}).get(RunConfig.__qualname__) or {})


def checkpoint_run_name(ckpt_path: str | Path) -> str | None:
    """The run name :class:`RunConfig` saved in a checkpoint; None for a checkpoint without it (or no checkpoint)."""
    name = run_state(ckpt_path).get("run_name")
    return str(name) if name else None
