"""The training job: DataModule + LightningModule + Trainer from Hydra, then the evaluator.

``train.py`` is a thin wrapper around :func:`run_train`. Everything the
Trainer owns (devices, DDP, precision, accumulation, checkpoints, loggers) comes
from ``configs/trainer``, ``configs/callbacks`` and ``configs/logger``. Each run
is filed in the results store (:mod:`glmrag.eval.store`) under ``results_dir``.
"""

from __future__ import annotations

import contextlib
import logging
import netrc
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from glmrag.data.files import register_data
from glmrag.eval import EvalResult
from glmrag.eval.store import run_record, write_run
from glmrag.eval.study_plots import evaluation_figures
from glmrag.index.embed import Embedder
from glmrag.io import LockTimeout, check_room, children_die_with_parent, file_lock, local_checkpoint
from glmrag.jobs.config_check import ConfigError, validate_train_config
from glmrag.jobs.evaluate import hydra_overrides, resolved_config_yaml, run_eval
from glmrag.jobs.launch import job_processes
from glmrag.jobs.loggers import closing, log_evaluation
from glmrag.models.checkpointing import check_architecture, readable_checkpoint, whole_checkpoint
from glmrag.models.kg_datamodule import dataset_index_config

log = logging.getLogger(__name__)

WANDB_HOST = "api.wandb.ai"
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM
"""Exit code of a run stopped by SIGTERM (a shell's 143): not 0, so a scheduler requeues it."""
RESUMABLE = ("last.ckpt", "hpc_ckpt_*.ckpt")
"""A run folder's resumable checkpoints: the last epoch or a SIGTERM (``last.ckpt``), a SLURM requeue's."""
KEY_SETTINGS = (
    "data.name",
    "datamodule.limit",
    "datamodule.train_fraction",
    "model.hidden_channels",
    "model.num_layers",
    "model.use_node_features",
    "model.t5",
    "model.t5_config",  # when set, a random T5 of these fields replaces model.t5
    "model.max_hops",
    "model.max_triplets",
    "model.layout",
    "model.attention",
    "trainer.max_epochs",
    "seed",
)
"""Settings a run's store entry records (those its model has), for the study report's columns and axes."""


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
    """``auto`` becomes ``$WANDB_MODE`` when set (``WANDB_MODE=disabled python train.py ...``), else
    ``online`` when the user is logged in to wandb, else ``offline``. An explicit mode is kept."""
    if mode not in ("auto", "online", "offline", "disabled"):
        raise ValueError(f"logger.wandb.mode must be auto, online, offline or disabled; got {mode!r}")
    env = {"dryrun": "offline", "run": "online"}.get(os.environ.get("WANDB_MODE", ""), os.environ.get("WANDB_MODE"))
    if mode == "auto" and env and env != "auto":
        return resolve_wandb_mode(env)
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
    """The best checkpoint of the run's first ModelCheckpoint, else its last one."""
    for cb in callbacks:
        if isinstance(cb, ModelCheckpoint):
            return cb.best_model_path or cb.last_model_path or None
    return None


def last_checkpoint(callbacks: list[Callback]) -> str | None:
    """The checkpoint of the final epoch: a ModelCheckpoint's ``last.ckpt``, or the latest of one without monitor."""
    for cb in callbacks:
        if isinstance(cb, ModelCheckpoint) and (cb.last_model_path or (cb.monitor is None and cb.best_model_path)):
            return cb.last_model_path or cb.best_model_path
    return None


def _resumable(folder: Path) -> list[tuple[float, Path]]:
    """(modification time, path) of the whole :data:`RESUMABLE` checkpoints directly in ``folder``; a truncated
    one (a kill while it was written, on old glmrag or another tool) is skipped with a warning."""
    found = [p for pattern in RESUMABLE for p in folder.glob(pattern) if p.is_file()]
    whole = [p for p in found if whole_checkpoint(p)]  # each file's zip directory read once
    for path in sorted(set(found) - set(whole)):
        log.warning("skipping %s: truncated or not a checkpoint (%d bytes)", path, path.stat().st_size)
    return [(p.stat().st_mtime, p) for p in whole]


def resume_checkpoint(folder: str | os.PathLike[str]) -> str | None:
    """The newest of the :data:`RESUMABLE` checkpoints directly in ``folder``; None when it holds none."""
    found = _resumable(Path(folder))
    return str(max(found)[1]) if found else None


def _newest_checkpoint_time(folder: Path) -> float | None:
    """When ``folder``'s newest resumable checkpoint, or its pretraining stage's, was written."""
    found = _resumable(folder) + _resumable(folder / "pretrain")
    return max(found)[0] if found else None


def last_run_folder(checkpoint_dir: str) -> Path | None:
    """The run folder ``ckpt_path=last`` resumes: ``checkpoint_dir`` when it holds a checkpoint, else the newest
    run of the same run name (its siblings, ``checkpoints/<run_name>/<run_id>``); None when there is none."""
    own = Path(checkpoint_dir)
    if _newest_checkpoint_time(own) is not None:
        return own
    runs = [(t, p) for p in own.parent.glob("*") if p.is_dir() and (t := _newest_checkpoint_time(p)) is not None]
    return max(runs)[1] if runs else None


def resume_folder(cfg: DictConfig) -> DictConfig:
    """``cfg`` set up to resume: ``ckpt_path=last`` becomes the newest checkpoint of :func:`last_run_folder`
    (null, a fresh start, when there is none), and ``checkpoint_dir`` the resumed checkpoint's folder, so the
    run writes beside it and ModelCheckpoint restores its best score (Lightning drops it, with a warning, when
    ``dirpath`` changed). A run stopped in GFM-RAG's pretraining resumes that stage (:func:`run_train`)."""
    if cfg.get("ckpt_path") == "last":
        folder = last_run_folder(cfg.checkpoint_dir)
        if folder is None:
            log.info("ckpt_path=last: no checkpoint of %s yet; starting a new run", cfg.run_name)
            return OmegaConf.merge(cfg, {"ckpt_path": None})
        log.info("ckpt_path=last: resuming the run in %s", folder)
        return OmegaConf.merge(cfg, {"checkpoint_dir": str(folder), "ckpt_path": resume_checkpoint(folder)})
    if not cfg.get("ckpt_path"):
        return cfg
    folder = str(local_checkpoint(cfg.ckpt_path).resolve().parent)
    if Path(cfg.checkpoint_dir).resolve() != Path(folder):
        log.info("resuming: checkpoints go to %s, the folder of ckpt_path (not %s)", folder, cfg.checkpoint_dir)
    return OmegaConf.merge(cfg, {"checkpoint_dir": folder})


def check_embed_dim(cfg: DictConfig) -> None:
    """``index.embed_dim``, which sizes the model's inputs, is the size of ``index.embed_model``'s vectors
    (the encoder is loaded once per process; the index build then reuses it)."""
    model, dim = OmegaConf.select(cfg, "index.embed_model"), OmegaConf.select(cfg, "index.embed_dim")
    if model and dim is not None and (size := Embedder(model).dim) != dim:
        raise ConfigError(
            f"index.embed_dim={dim!r}: index.embed_model={model} gives {size}-d vectors; set index.embed_dim={size}"
        )


class RunFolderBusy(RuntimeError):
    """Another live run writes the same checkpoint folder (its ``last.ckpt`` would replace this run's)."""


@contextlib.contextmanager
def run_folder_lock(cfg: DictConfig) -> Iterator[None]:
    """Hold ``<checkpoint_dir>``'s lock (a file beside it, naming this run) while the job runs; raise
    :class:`RunFolderBusy` when another live run holds it. Only the launching process (rank 0) takes it:
    the DDP ranks it starts write the same folder by design."""
    if rank_zero_only.rank != 0:
        yield
        return
    folder = Path(cfg.checkpoint_dir)
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = folder.parent / f".{folder.name}.lock"
    try:
        with file_lock(lock, timeout=0, what="the run folder lock"):
            yield
    except LockTimeout as err:
        raise RunFolderBusy(
            f"checkpoint_dir={folder} belongs to a run that is still going ({err}); two runs there would replace "
            "each other's last.ckpt. Give this run its own folder (run_id=... or checkpoint_dir=...), or wait"
        ) from None


def eval_datasets(cfg: DictConfig) -> list[str]:
    """The datasets the trained model is evaluated on: ``cfg.eval_data``, else the training data."""
    return [str(name) for name in cfg.get("eval_data") or [cfg.data.name]]


def evaluation_config(cfg: DictConfig, ckpt_path: str, dataset: str | None = None, device: str = "cpu") -> DictConfig:
    """An ``eval.yaml``-shaped config: the trained checkpoint and the baselines on the test split of ``dataset``.

    ``dataset`` (default: the training data ``cfg.data.name``) is a registry name; another dataset than the
    training data (GLM-RAG Table 1, transfer) is read with ``cfg.data``'s root and limit and written to
    ``<output_dir>/eval_<dataset>``; ``index.extractor`` may map dataset names to extractors. The checkpoint
    runs on ``device``: the Trainer's (``cuda:0`` after GPU training).
    """
    name = dataset or cfg.data.name
    checkpoint = {
        "_target_": "glmrag.retrievers.gnn_checkpoint.load_checkpoint_retriever",
        "ckpt_path": ckpt_path,
        "device": device,
    }
    retrievers = {cfg.run_name: checkpoint}
    retrievers.update(OmegaConf.to_container(cfg.baselines, resolve=True) or {})
    # index.extractor may map each dataset to its extractor: the evaluated dataset's
    index = dataset_index_config(OmegaConf.to_container(cfg.index, resolve=True), name)
    data = {**OmegaConf.to_container(cfg.data, resolve=True), "name": name, "split": cfg.eval_split}
    return OmegaConf.create(
        {
            "data": {**data, "extractor": index["extractor"]},
            "index": index,
            "retriever": retrievers,
            "output_dir": str(Path(cfg.output_dir) / ("eval" if name == cfg.data.name else f"eval_{name}")),
            "reference": cfg.run_name,
            "ks": list(cfg.ks),
            "top_k": None,  # the full ranking: MRR counts every position
            "n_boot": cfg.n_boot,
            "seed": cfg.seed,
            "allow_train_overlap": bool(cfg.get("allow_train_overlap", False)),
            "qa": False,  # answering after training: python eval.py retriever=checkpoint ckpt_path=... qa=true
            "qa_baselines": [],
        }
    )


def make_loggers(cfg: DictConfig) -> list[Logger]:
    """The loggers of ``cfg.logger``; the caller closes them (:func:`glmrag.jobs.loggers.closing`)."""
    return _instantiate_all(cfg.get("logger"))


def fit(cfg: DictConfig, loggers: list[Logger]) -> tuple[L.Trainer, list[Callback]]:
    """Instantiate DataModule, module, callbacks and Trainer from ``cfg`` and run ``Trainer.fit`` into ``loggers``."""
    datamodule: L.LightningDataModule = hydra.utils.instantiate(cfg.datamodule)
    model: L.LightningModule = hydra.utils.instantiate(cfg.model)
    callbacks: list[Callback] = _instantiate_all(cfg.get("callbacks"))
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    resume = cfg.get("ckpt_path")
    # weights_only: a checkpoint is data, never code (local_checkpoint refuses URLs, which Lightning would unpickle)
    resume = str(readable_checkpoint(local_checkpoint(resume))) if resume else None
    if resume:
        check_architecture(model, resume)  # a named error, not torch's size-mismatch trace
    trainer.fit(model, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    return trainer, callbacks


def pretrain_config(cfg: DictConfig, resume: bool = False) -> DictConfig:
    """The KG-completion stage of GFM-RAG: ``cfg`` with the model in ``kgc`` stage and ``cfg.pretrain`` merged in;
    with ``resume``, from the stage's own newest checkpoint (if any)."""
    folder = Path(cfg.checkpoint_dir) / "pretrain"
    ckpt = resume_checkpoint(folder) if resume else None
    pre = OmegaConf.merge(cfg, {"model": {"stage": "kgc", "init_from": None}, "ckpt_path": ckpt})
    pre.trainer.max_epochs = cfg.pretrain.max_epochs
    pre.checkpoint_dir = str(folder)
    pre.output_dir = str(Path(cfg.output_dir) / "pretrain")
    return pre


def run_train(cfg: DictConfig) -> dict[str, Any]:
    """(Optionally pretrain,) fit, test the best checkpoint, then compare it with the baselines.

    With ``cfg.pretrain`` set (GFM-RAG), a KG-completion run comes first and the
    fine-tuning starts from its last checkpoint (``model.init_from``). Returns the
    Trainer's callback metrics (``metrics``), the best checkpoint path, the
    :class:`~glmrag.eval.EvalResult` per evaluated dataset (``evals``; ``eval``: the
    first, None when ``evaluate`` is false) and the run's results-store folders
    (``stored``; none for a fast_dev_run).
    """
    validate_train_config(cfg)
    check_embed_dim(cfg)
    register_data(cfg.data)  # data=files: the user's own files become dataset cfg.data.name
    children_die_with_parent()  # DataLoader / spaCy workers must not outlive a killed job
    resume_last = cfg.get("ckpt_path") == "last"  # also the pretraining stage, if the run stopped there
    cfg = resume_folder(OmegaConf.merge(cfg, {"run_id": str(cfg.run_id)}))  # the start time, read once
    written = {
        "output_dir": cfg.output_dir,
        "checkpoint_dir": cfg.checkpoint_dir,
        "the index cache": cfg.index.cache_dir,
    }
    for what, folder in written.items():
        check_room(folder, what)  # a full disk fails now, not after the training
    try:
        # one live run per run folder; DDP: this job's ranks, and nothing of them left for the next job
        with run_folder_lock(cfg), job_processes(cfg.run_id):
            return _pretrain_and_train(cfg, resume_pretraining=resume_last)
    except SIGTERMException:  # Lightning's at a SIGTERM; the preemption checkpoint is written
        log.warning("stopped by SIGTERM; resume with the same command and ckpt_path=last")
        raise SystemExit(PREEMPTED_EXIT_CODE) from None


def _pretrain_and_train(cfg: DictConfig, resume_pretraining: bool) -> dict[str, Any]:
    L.seed_everything(cfg.seed, workers=True)
    if cfg.get("pretrain") and not cfg.get("ckpt_path"):
        pre = pretrain_config(cfg, resume=resume_pretraining)
        with closing(make_loggers(pre)) as pre_loggers:  # the fine-tuning logs into a run of its own
            _, pre_callbacks = fit(pre, pre_loggers)
        last = last_checkpoint(pre_callbacks)
        if last:
            cfg = OmegaConf.merge(cfg, {"model": {"init_from": last}})
            log.info("fine-tuning from the KG-completion checkpoint %s", last)
        L.seed_everything(cfg.seed, workers=True)
    # closed even when the job fails: the next job in this process (a Hydra multirun) starts its own run
    with closing(make_loggers(cfg)) as loggers:
        return fit_and_evaluate(cfg, loggers)


def fit_and_evaluate(cfg: DictConfig, loggers: list[Logger]) -> dict[str, Any]:
    """Fit, test and evaluate the best checkpoint, file the run (see :func:`run_train`); logs into ``loggers``."""
    trainer, callbacks = fit(cfg, loggers)
    # a fast_dev_run is a smoke test of the loops: Lightning writes no real checkpoint to evaluate
    best = None if trainer.fast_dev_run else best_checkpoint(callbacks)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if cfg.get("test") and best:  # every rank: under DDP, test is a collective run
        trainer.test(datamodule=trainer.datamodule, ckpt_path=best, weights_only=True)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    device = str(trainer.strategy.root_device)  # the evaluator runs the checkpoint where training ran
    evals: dict[str, EvalResult] = {}
    if cfg.get("evaluate") and best and trainer.is_global_zero:
        for name in eval_datasets(cfg):
            eval_cfg = evaluation_config(cfg, best, name, device)
            evals[name] = result = run_eval(eval_cfg)
            figures = evaluation_figures(result, eval_cfg.output_dir)  # PNGs beside metrics.json
            prefix = "eval" if name == cfg.data.name else f"eval/{name}"
            for logger in loggers:  # a WandbLogger keeps the last value of each key as the run's summary
                logger.log_metrics(
                    {f"{prefix}/{m}": iv.mean for m, iv in result.overall[cfg.run_name].items() if hasattr(iv, "mean")}
                )
            log_evaluation(loggers, result, None, prefix, figures)  # wandb: Tables and the figures as Images
    if best and trainer.is_global_zero:
        log_evaluation(loggers, None, best)  # wandb: an artifact online, a copy in the run folder offline
    stored = []
    if trainer.is_global_zero and not trainer.fast_dev_run:
        model = trainer.lightning_module
        stored = store_train_run(cfg, model, metrics, best, evals)
        for logger in loggers:
            logger.log_hyperparams({"results": [str(p) for p in stored], "num_parameters": num_parameters(model)})
    log.info("best checkpoint: %s", best)
    first = next(iter(evals.values()), None)
    return {"metrics": metrics, "best_checkpoint": best, "eval": first, "evals": evals, "stored": stored}


def num_parameters(module: torch.nn.Module, trainable_only: bool = False) -> int:
    """Parameters of ``module``: the retriever's own weights (GLM-RAG Table 18 counts a GLM's T5 encoder,
    the only part of T5 the GLM holds, with its head)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def store_train_run(
    cfg: DictConfig,
    model: torch.nn.Module,
    metrics: dict[str, float],
    best: str | None,
    evals: dict[str, EvalResult],
) -> list[Path]:
    """File the run in the results store: one entry per evaluated dataset (one, without metrics, if none)."""
    absent = object()
    settings = {key: OmegaConf.select(cfg, key, default=absent) for key in KEY_SETTINGS}
    run = {
        "study": cfg.study,
        "run_name": cfg.run_name,
        "family": cfg.family,
        "model": cfg.model._target_,
        "train_data": list(cfg.datamodule.datasets),
        "num_parameters": num_parameters(model),
        "num_trainable_parameters": num_parameters(model, trainable_only=True),
        "best_checkpoint": best,
        "output_dir": str(cfg.output_dir),
        "settings": {
            key: OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            for key, value in settings.items()
            if value is not absent
        },
        "overrides": hydra_overrides(),
    }
    config_yaml = resolved_config_yaml(cfg)
    paths = [
        write_run(
            cfg.results_dir,
            cfg.run_name if name == cfg.data.name else f"{cfg.run_name}_on_{name}",
            run_record(result, {**run, "eval_data": name}, metrics),
            config_yaml,
        )
        for name, result in evals.items()
    ] or [write_run(cfg.results_dir, cfg.run_name, run_record(None, run, metrics), config_yaml)]
    log.info("stored in %s", ", ".join(str(p) for p in paths))
    return paths
