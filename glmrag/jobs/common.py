"""What the jobs share: composing a job config, the command-line overrides, the resolved config as YAML, and
the run name a checkpoint carries.

:func:`compose_config` is how the training job builds its evaluation (``configs/eval.yaml`` with values set),
so both jobs read one evaluation schema; :func:`hydra_overrides` and :func:`resolved_config_yaml` describe a run
for the results store (:mod:`glmrag.eval.store`); :class:`RunName` writes into every checkpoint the run name the
evaluation job labels it by (:func:`checkpoint_run_name`).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
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


class RunName(Callback):
    """The training run's name, saved in every checkpoint it writes (under the state key ``RunName``)."""

    def __init__(self, run_name: str) -> None:
        self.run_name = run_name

    def state_dict(self) -> dict[str, Any]:
        return {"run_name": self.run_name}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing: a resumed run keeps its own name."""


def checkpoint_run_name(ckpt_path: str | Path) -> str | None:
    """The run name :class:`RunName` saved in a checkpoint; None for a checkpoint without it (or no checkpoint)."""
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError):  # the retriever's loader names the problem
        return None
    name = ckpt.get("callbacks", {}).get(RunName.__qualname__, {}).get("run_name")
    return str(name) if name else None
