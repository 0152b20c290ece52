"""The training job: DataModule + LightningModule + Trainer from Hydra, then the evaluator.

``train.py`` is a thin wrapper around :func:`run_train`. Everything the
Trainer owns (devices, DDP, precision, accumulation, checkpoints, loggers) comes
from ``configs/trainer``, ``configs/callbacks`` and ``configs/logger``.
"""

from __future__ import annotations

import logging
import netrc
import os
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from glmrag.eval import EvalResult
from glmrag.pipeline import run_eval

log = logging.getLogger(__name__)

WANDB_HOST = "api.wandb.ai"


def wandb_logged_in() -> bool:
    """True when wandb has credentials: ``WANDB_API_KEY`` or a ``~/.netrc`` entry from ``wandb login``.

    Only checks that they exist; the key itself is read by wandb, never by glmrag.
    """
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(WANDB_HOST) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode(mode: str) -> str:
    """``auto`` becomes ``online`` when the user is logged in to wandb, else ``offline``."""
    if mode not in ("auto", "online", "offline", "disabled"):
        raise ValueError(f"logger.wandb.mode must be auto, online, offline or disabled; got {mode!r}")
    if mode == "auto":
        return "online" if wandb_logged_in() else "offline"
    return mode


def wandb_logger(
    project: str, name: str | None, save_dir: str, mode: str = "auto", tags: list[str] | None = None
) -> WandbLogger:
    """A WandbLogger that runs offline unless the user is logged in (``mode="auto"``).

    Offline runs are written under ``save_dir/wandb`` and can be uploaded later
    with ``wandb sync``. ``mode`` may also be ``online``, ``offline`` or ``disabled``.
    """
    mode = resolve_wandb_mode(mode)
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    log.info("wandb logging %s (project %s, run %s)", mode, project, name)
    return WandbLogger(project=project, name=name, save_dir=save_dir, mode=mode, tags=list(tags or []))


def _instantiate_all(cfg: DictConfig | None) -> list[Any]:
    """One object per entry of a config group selected as a dict (callbacks, loggers)."""
    if not cfg:
        return []
    return [hydra.utils.instantiate(node) for node in cfg.values() if node is not None and "_target_" in node]


def best_checkpoint(callbacks: list[Callback]) -> str | None:
    """The best checkpoint of the run's ModelCheckpoint, else its last one."""
    for cb in callbacks:
        if isinstance(cb, ModelCheckpoint):
            return cb.best_model_path or cb.last_model_path or None
    return None


def evaluation_config(cfg: DictConfig, ckpt_path: str) -> DictConfig:
    """An ``eval.yaml``-shaped config: the trained checkpoint and the baselines on the test split."""
    checkpoint = {"_target_": "glmrag.retrievers.checkpoint.load_checkpoint_retriever", "ckpt_path": ckpt_path}
    retrievers = {cfg.run_name: checkpoint}
    retrievers.update(OmegaConf.to_container(cfg.baselines, resolve=True) or {})
    index = OmegaConf.to_container(cfg.index, resolve=True)
    if isinstance(index["extractor"], dict):  # several training KGs: the evaluated one's extractor
        index["extractor"] = index["extractor"][cfg.data.name]
    return OmegaConf.create(
        {
            "data": {**OmegaConf.to_container(cfg.data, resolve=True), "split": cfg.eval_split},
            "index": index,
            "retriever": retrievers,
            "output_dir": str(Path(cfg.output_dir) / "eval"),
            "reference": cfg.run_name,
            "ks": list(cfg.ks),
            "top_k": max(cfg.ks),
            "n_boot": cfg.n_boot,
            "seed": cfg.seed,
        }
    )


def fit(cfg: DictConfig) -> tuple[L.Trainer, list[Callback], list[Logger]]:
    """Instantiate DataModule, module, callbacks, loggers and Trainer from ``cfg`` and run ``Trainer.fit``."""
    datamodule: L.LightningDataModule = hydra.utils.instantiate(cfg.datamodule)
    model: L.LightningModule = hydra.utils.instantiate(cfg.model)
    callbacks: list[Callback] = _instantiate_all(cfg.get("callbacks"))
    loggers: list[Logger] = _instantiate_all(cfg.get("logger"))
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    return trainer, callbacks, loggers


def pretrain_config(cfg: DictConfig) -> DictConfig:
    """The KG-completion stage of GFM-RAG: ``cfg`` with the model in ``kgc`` stage and ``cfg.pretrain`` merged in."""
    pre = OmegaConf.merge(cfg, {"model": {"stage": "kgc", "init_from": None}, "ckpt_path": None})
    pre.trainer.max_epochs = cfg.pretrain.max_epochs
    pre.checkpoint_dir = str(Path(cfg.checkpoint_dir) / "pretrain")
    pre.output_dir = str(Path(cfg.output_dir) / "pretrain")
    return pre


def run_train(cfg: DictConfig) -> dict[str, Any]:
    """(Optionally pretrain,) fit, test the best checkpoint, then compare it with the baselines.

    With ``cfg.pretrain`` set (GFM-RAG), a KG-completion run comes first and the
    fine-tuning starts from its last checkpoint (``model.init_from``). Returns the
    Trainer's callback metrics, the best checkpoint path and the
    :class:`~glmrag.eval.EvalResult` (None when ``evaluate`` is false).
    """
    L.seed_everything(cfg.seed, workers=True)
    if cfg.get("pretrain") and not cfg.get("ckpt_path"):
        _, pre_callbacks, _ = fit(pretrain_config(cfg))
        last = next((cb.last_model_path for cb in pre_callbacks if isinstance(cb, ModelCheckpoint)), None)
        if last:
            cfg = OmegaConf.merge(cfg, {"model": {"init_from": last}})
            log.info("fine-tuning from the KG-completion checkpoint %s", last)
        L.seed_everything(cfg.seed, workers=True)

    trainer, callbacks, loggers = fit(cfg)
    # a fast_dev_run is a smoke test of the loops: Lightning writes no real checkpoint to evaluate
    best = None if trainer.fast_dev_run else best_checkpoint(callbacks)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if cfg.get("test") and best:  # every rank: under DDP, test is a collective run
        trainer.test(datamodule=trainer.datamodule, ckpt_path=best)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    result: EvalResult | None = None
    if cfg.get("evaluate") and best and trainer.is_global_zero:
        result = run_eval(evaluation_config(cfg, best))
        for logger in loggers:
            logger.log_metrics(
                {f"eval/{m}": iv.mean for m, iv in result.overall[cfg.run_name].items() if hasattr(iv, "mean")}
            )
    log.info("best checkpoint: %s", best)
    return {"metrics": metrics, "best_checkpoint": best, "eval": result}
