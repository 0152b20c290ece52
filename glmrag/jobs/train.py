"""The training job (``train.py``): fit and test a retriever, then hand its best checkpoint to the evaluation job.

DataModule, LightningModule and Trainer come from Hydra (``configs/trainer``, ``configs/callbacks``,
``configs/logger`` own devices, DDP, precision, checkpoints and loggers). The evaluation config is
``configs/eval.yaml`` with this run's checkpoint, baselines and data (:func:`evaluation_config`). A best
checkpoint no better than the model before training is named in the log, ``results.md`` and ``metrics.json``
(:class:`StartScore`). Each run is filed in the results store (:mod:`glmrag.eval.store`) under ``results_dir``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import resource
import signal
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from glmrag.data.files import register_data
from glmrag.datamodules.kg_datamodule import dataset_index_config
from glmrag.eval import EvalResult
from glmrag.eval.store import NO_GAIN, run_record, write_run
from glmrag.index.embed import Embedder
from glmrag.io import check_room, children_die_with_parent, local_checkpoint
from glmrag.jobs.common import RunConfig, compose_config, hydra_overrides, instantiate_datamodule, resolved_config_yaml
from glmrag.jobs.config_check import ConfigError, check_resume_config, validate_train_config
from glmrag.jobs.evaluate import run_eval  # the hand-off: the evaluation job's entry, nothing else of it
from glmrag.jobs.launch import job_processes
from glmrag.jobs.loggers import closing, log_evaluation, log_summary
from glmrag.jobs.run_folder import resume_checkpoint, resume_folder, run_folder_lock
from glmrag.models.checkpointing import check_architecture, readable_checkpoint

log = logging.getLogger(__name__)

UNTRAINED_CHECKPOINT = "untrained.ckpt"
"""The model before training, saved in the run's checkpoint folder with ``evaluate_untrained`` and evaluated beside
the best checkpoint as the system ``untrained``: the table itself says what training added."""
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM
"""Exit code of a run stopped by SIGTERM (a shell's 143): not 0, so a scheduler requeues it."""
KEY_SETTINGS = (
    "data.name",
    "datamodule.limit",
    "datamodule.train_fraction",
    "model.gnn.hidden_channels",
    "model.gnn.num_layers",
    "model.gnn.use_node_features",
    "model.glm.encoder",
    "model.glm.encoder_config",  # when set, a random T5 (or MPNet) of these fields replaces model.glm.encoder
    "model.glm.backbone",
    "model.glm.frozen_layers",
    "model.subgraph.max_hops",
    "model.subgraph.max_triplets",
    "model.subgraph.layout",
    "model.glm.attention",
    "trainer.max_epochs",
    "seed",
)
"""Settings a run's store entry records (those its model has), for the study report's columns and axes."""


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


def monitoring_checkpoint(callbacks: list[Callback]) -> ModelCheckpoint | None:
    """The first ModelCheckpoint that picks the best epoch by a metric (the one :func:`best_checkpoint` reads)."""
    return next((cb for cb in callbacks if isinstance(cb, ModelCheckpoint) and cb.monitor), None)


@contextlib.contextmanager
def random_state_kept() -> Iterator[None]:
    """The body leaves every random stream (Python, NumPy, torch, initialised CUDA) where it found it."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


class StartScore(Callback):
    """The monitored validation metric of the model before training (:meth:`measure`), saved in every checkpoint
    so that a resumed run compares with it too (:meth:`no_better_warning`)."""

    def __init__(self) -> None:
        self.monitor: str | None = None
        self.score: float | None = None

    def measure(
        self,
        trainer: L.Trainer,
        model: L.LightningModule,
        datamodule: L.LightningDataModule,
        save_to: Path | None = None,
    ) -> None:
        """Validate the untrained ``model`` once (every DDP rank: validation and saving are collective), then save
        it to ``save_to`` (weights and hyper-parameters) when given. The random streams are kept, so the training
        that follows is the one a run without this check would do."""
        checkpoint = monitoring_checkpoint(trainer.callbacks)
        if checkpoint is None:
            return
        with random_state_kept():
            trainer.validate(model, datamodule=datamodule, verbose=False)
        value = trainer.callback_metrics.get(checkpoint.monitor)
        self.monitor, self.score = checkpoint.monitor, None if value is None else float(value)
        log.info("before training: %s = %s", self.monitor, self.score)
        if save_to is not None:
            trainer.save_checkpoint(save_to, weights_only=True)

    @staticmethod
    def of(callbacks: list[Callback]) -> StartScore:
        """The :class:`StartScore` among ``callbacks`` (:func:`fit` adds one)."""
        return next(cb for cb in callbacks if isinstance(cb, StartScore))

    def metrics(self) -> dict[str, float]:
        """``{"<monitor>_untrained": score}`` when measured, else ``{}``."""
        return {} if self.score is None else {f"{self.monitor}_untrained": self.score}

    def warnings(self, callbacks: list[Callback]) -> list[str]:
        """:meth:`no_better_warning` as a list (empty or one warning)."""
        return [w] if (w := self.no_better_warning(callbacks)) else []

    def no_better_warning(self, callbacks: list[Callback]) -> str | None:
        """A warning when the best checkpoint's score is no better than :attr:`score`; None otherwise, or when
        either score is unknown (a run resumed from a checkpoint written before this check)."""
        checkpoint = monitoring_checkpoint(callbacks)
        if checkpoint is None or checkpoint.best_model_score is None or self.score is None:
            return None
        if checkpoint.monitor != self.monitor:
            return None
        best = float(checkpoint.best_model_score)
        if (best > self.score) if checkpoint.mode == "max" else (best < self.score):
            return None
        return (
            f"Warning: the best checkpoint's {self.monitor} ({best:.4f}) is no better than the untrained model's "
            f"({self.score:.4f}): {NO_GAIN}. Check the learning rate, the number of epochs and "
            "the training questions."
        )

    def state_dict(self) -> dict[str, Any]:
        return {"monitor": self.monitor, "score": self.score}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.monitor, self.score = state_dict.get("monitor"), state_dict.get("score")


def check_embed_dim(cfg: DictConfig) -> None:
    """``index.embed_dim``, which sizes the model's inputs, is the size of ``index.embed_model``'s vectors
    (the encoder is loaded once per process; the index build then reuses it)."""
    model, dim = OmegaConf.select(cfg, "index.embed_model"), OmegaConf.select(cfg, "index.embed_dim")
    if model and dim is not None and (size := Embedder(model).dim) != dim:
        raise ConfigError(
            f"index.embed_dim={dim!r}: index.embed_model={model} gives {size}-d vectors; set index.embed_dim={size}"
        )


def eval_datasets(cfg: DictConfig) -> list[str]:
    """The datasets the trained model is evaluated on: ``cfg.eval_data``, else the training data."""
    return [str(name) for name in cfg.get("eval_data") or [cfg.data.name]]


def evaluation_config(cfg: DictConfig, ckpt_path: str, dataset: str | None = None, device: str = "cpu") -> DictConfig:
    """``configs/eval.yaml`` set to evaluate this run's checkpoint against its baselines on the test split of
    ``dataset``: only keys that file has are set, so both jobs read one evaluation schema.

    ``dataset`` (default: the training data ``cfg.data.name``) is a registry name; another dataset than the
    training data (GLM-RAG Table 1, transfer) is read with ``cfg.data``'s root and limit and written to
    ``<output_dir>/eval_<dataset>``; ``index.extractor`` may map dataset names to extractors. The checkpoint
    (eval.yaml's ``checkpoint`` retriever, named by the run) runs on ``device``: the Trainer's. With
    ``evaluate_untrained``, the run's :data:`UNTRAINED_CHECKPOINT` is evaluated beside it as ``untrained``.
    """
    name = dataset or cfg.data.name
    eval_cfg = compose_config("eval", ["retriever=[checkpoint]"])
    eval_cfg.ckpt_path = ckpt_path
    checkpoint = OmegaConf.to_container(eval_cfg.retriever.checkpoint, resolve=True) | {"device": device}
    systems = {cfg.run_name: checkpoint}
    if cfg.get("evaluate_untrained") and (untrained := Path(cfg.checkpoint_dir) / UNTRAINED_CHECKPOINT).is_file():
        systems["untrained"] = checkpoint | {"ckpt_path": str(untrained)}
    index = dataset_index_config(OmegaConf.to_container(cfg.index, resolve=True), name)
    data = {**OmegaConf.to_container(cfg.data, resolve=True), "name": name, "split": cfg.eval_split}
    values = {
        "data": {**data, "extractor": index["extractor"]},
        "index": index,
        "retriever": systems | (OmegaConf.to_container(cfg.baselines, resolve=True) or {}),
        "output_dir": str(Path(cfg.output_dir) / ("eval" if name == cfg.data.name else f"eval_{name}")),
        "run_name": cfg.run_name,
        "reference": cfg.run_name,
        "ks": list(cfg.ks),
        "n_boot": cfg.n_boot,
        "seed": cfg.seed,
        "allow_train_overlap": bool(cfg.get("allow_train_overlap", False)),
        "strict_overlap": bool(cfg.get("strict_overlap", False)),
        "quiet": bool(cfg.get("quiet", False)),
    }
    for key, value in values.items():
        eval_cfg[key] = value  # the composed config is in struct mode: a key eval.yaml lacks raises
    return eval_cfg


def make_loggers(cfg: DictConfig) -> list[Logger]:
    """The loggers of ``cfg.logger``; the caller closes them (:func:`glmrag.jobs.loggers.closing`)."""
    return _instantiate_all(cfg.get("logger"))


def fit(cfg: DictConfig, loggers: list[Logger], measure_start: bool = False) -> tuple[L.Trainer, list[Callback]]:
    """Instantiate DataModule, module, callbacks and Trainer from ``cfg`` and run ``Trainer.fit`` into ``loggers``.

    With ``measure_start``, a fresh run (not resumed, not a fast_dev_run) first validates the untrained model
    (:class:`StartScore`, one of the returned callbacks).
    """
    datamodule: L.LightningDataModule = instantiate_datamodule(cfg)
    model: L.LightningModule = hydra.utils.instantiate(cfg.model, kgs=datamodule)  # its KGs: the DataModule's
    start = StartScore()
    run = RunConfig(cfg.run_name, resolved_config_yaml(cfg))
    callbacks: list[Callback] = [*_instantiate_all(cfg.get("callbacks")), start, run]
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    resume = checkpoint_to_resume(cfg, model)
    untrained = Path(cfg.checkpoint_dir) / UNTRAINED_CHECKPOINT
    if measure_start and not resume and not trainer.fast_dev_run:
        start.measure(trainer, model, datamodule, save_to=untrained if cfg.get("evaluate_untrained") else None)
    with warnings.catch_warnings():
        folder = untrained.parent
        if folder.is_dir() and [p.name for p in folder.iterdir()] == [untrained.name]:  # this run's, not an old run's
            warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        trainer.fit(model, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    return trainer, callbacks


def checkpoint_to_resume(cfg: DictConfig, model: L.LightningModule) -> str | None:
    """``cfg.ckpt_path`` as a readable local file, saved by a run of the same config (but the keys a resume
    may change: :func:`~glmrag.jobs.config_check.check_resume_config`) and whose architecture is ``model``'s (a named
    error, not torch's size-mismatch trace); None for a fresh run. Loaded weights-only: a checkpoint is data,
    never code (:func:`~glmrag.io.local_checkpoint` refuses URLs, which Lightning would unpickle)."""
    if not (path := cfg.get("ckpt_path")):
        return None
    resume = str(readable_checkpoint(local_checkpoint(path)))
    check_architecture(model, resume)
    check_resume_config(cfg, resume)
    return resume


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
    """The training job: the checks that fail before any work, then :func:`train` in the run's folder (after
    GFM-RAG's KG-completion stage, :func:`pretrain`, when ``cfg.pretrain`` is set).

    Returns :func:`train`'s outcome: the Trainer's callback metrics (``metrics``), the best checkpoint path,
    ``warnings`` (the best checkpoint no better than the untrained model), the
    :class:`~glmrag.eval.EvalResult` per evaluated dataset (``evals``; ``eval``: the first, None when
    ``evaluate`` is false) and the run's results-store folders (``stored``; none for a fast_dev_run).
    """
    validate_train_config(cfg)
    check_embed_dim(cfg)
    resume_last = cfg.get("ckpt_path") == "last"  # also the pretraining stage, if the run stopped there
    cfg = resume_folder(OmegaConf.merge(cfg, {"run_id": str(cfg.run_id)}))  # the start time, read once
    check_room_for_run(cfg)
    register_data(cfg.data)  # data=files: the user's own files become dataset cfg.data.name
    with run_management(cfg):
        if cfg.get("pretrain") and not cfg.get("ckpt_path"):
            cfg = pretrain(cfg, resume=resume_last)
        return train(cfg)


def check_room_for_run(cfg: DictConfig) -> None:
    """A full disk fails now, not after the training: room in every folder the run writes. The results store,
    which is not made, is checked first, so a run refused for it leaves no empty folder either."""
    if not cfg.trainer.get("fast_dev_run"):  # a smoke test files no run; a stopped run leaves no empty store
        check_room(cfg.results_dir, "results_dir", create=False)
    written = {
        "output_dir": cfg.output_dir,
        "checkpoint_dir": cfg.checkpoint_dir,
        "the index cache": cfg.index.cache_dir,
    }
    for what, folder in written.items():
        check_room(folder, what)


@contextlib.contextmanager
def run_management(cfg: DictConfig) -> Iterator[None]:
    """The body runs as one job: its DataLoader and spaCy workers die with it, it holds its run folder's lock
    (one live run per folder), its DDP ranks and process group are its own (the next job of a multirun starts
    its own), and a SIGTERM (preemption; the checkpoint is written) exits with :data:`PREEMPTED_EXIT_CODE`."""
    children_die_with_parent()
    try:
        with run_folder_lock(cfg), job_processes(cfg.run_id):
            yield
    except SIGTERMException:  # Lightning's at a SIGTERM; the preemption checkpoint is written
        log.warning("stopped by SIGTERM; resume with the same command and ckpt_path=last")
        raise SystemExit(PREEMPTED_EXIT_CODE) from None


def pretrain(cfg: DictConfig, resume: bool) -> DictConfig:
    """GFM-RAG's KG-completion stage (:func:`pretrain_config`, logged as a run of its own); returns ``cfg`` set
    to fine-tune from the stage's last checkpoint (``model.init_from``)."""
    L.seed_everything(cfg.seed, workers=True)
    pre = pretrain_config(cfg, resume=resume)
    with closing(make_loggers(pre)) as loggers:
        _, callbacks = fit(pre, loggers)
    if last := last_checkpoint(callbacks):
        cfg = OmegaConf.merge(cfg, {"model": {"init_from": last}})
        log.info("fine-tuning from the KG-completion checkpoint %s", last)
    return cfg


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit and test the model of ``cfg``, evaluate its best checkpoint against the baselines, file the run.

    The loggers are closed even when the job fails: the next job in this process (a Hydra multirun) starts
    its own run. Under DDP every rank fits and tests (collective runs); rank 0 alone evaluates and files.
    """
    L.seed_everything(cfg.seed, workers=True)
    with closing(make_loggers(cfg)) as loggers:
        cpu = {"start": cpu_seconds()}
        trainer, callbacks = fit(cfg, loggers, measure_start=True)
        # a fast_dev_run is a smoke test of the loops: Lightning writes no real checkpoint to evaluate
        best = None if trainer.fast_dev_run else best_checkpoint(callbacks)
        start = StartScore.of(callbacks)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()} | start.metrics()
        warnings = start.warnings(callbacks) if best else []
        if cfg.get("test") and best:
            trainer.test(datamodule=trainer.datamodule, ckpt_path=best, weights_only=True)
            metrics |= {k: float(v) for k, v in trainer.callback_metrics.items()}
        if trainer.is_global_zero:  # the run's final numbers: wandb's summary (the evaluation adds its means)
            log_summary(loggers, {**metrics, "best_checkpoint": best})
        cpu["train"] = cpu_seconds()
        evals = evaluate_on_rank_zero(cfg, trainer, best, loggers, warnings)
        cpu = {"train": cpu["train"] - cpu["start"], "evaluation": cpu_seconds() - cpu["train"]}
        stored = file_on_rank_zero(cfg, trainer, metrics, best, evals, warnings, loggers, cpu)
        log.info("best checkpoint: %s", best)
    first = next(iter(evals.values()), None)
    return dict(metrics=metrics, best_checkpoint=best, warnings=warnings, eval=first, evals=evals, stored=stored)


def evaluate_on_rank_zero(
    cfg: DictConfig, trainer: L.Trainer, best: str | None, loggers: list[Logger], warnings: list[str]
) -> dict[str, EvalResult]:
    """On rank 0: log ``warnings``, evaluate ``best`` (when ``cfg.evaluate``) on the Trainer's device, and hand
    the checkpoint to the loggers; ``{}`` on other ranks and without a checkpoint."""
    if not trainer.is_global_zero:
        return {}
    for warning in warnings:
        log.warning(warning)
    evals = (
        evaluate_checkpoint(cfg, best, str(trainer.strategy.root_device), loggers, warnings)
        if cfg.get("evaluate") and best
        else {}
    )
    if best:
        log_evaluation(loggers, None, best)  # wandb: an artifact online, a copy in the run folder offline
    return evals


def file_on_rank_zero(
    cfg: DictConfig,
    trainer: L.Trainer,
    metrics: dict[str, float],
    best: str | None,
    evals: dict[str, EvalResult],
    warnings: list[str],
    loggers: list[Logger],
    cpu: dict[str, float] | None = None,
) -> list[Path]:
    """On rank 0 of a real run (not a fast_dev_run): file the run in the results store
    (:func:`store_train_run`) and name its entries to the loggers; ``[]`` otherwise."""
    if not trainer.is_global_zero or trainer.fast_dev_run:
        return []
    model = trainer.lightning_module
    count = getattr(trainer.datamodule, "train_question_count", None)
    stored = store_train_run(cfg, model, metrics, best, evals, warnings, count() if count else None, cpu)
    for logger in loggers:
        logger.log_hyperparams({"results": [str(p) for p in stored], "num_parameters": num_parameters(model)})
    return stored


def evaluate_checkpoint(
    cfg: DictConfig, best: str, device: str, loggers: list[Logger], warnings: list[str]
) -> dict[str, EvalResult]:
    """Dataset -> the evaluation job's result for the checkpoint ``best`` on each of :func:`eval_datasets`,
    run on ``device`` (where training ran); its means, tables and figures go to ``loggers``."""
    evals: dict[str, EvalResult] = {}
    for name in eval_datasets(cfg):
        eval_cfg = evaluation_config(cfg, best, name, device)
        evals[name] = result = run_eval(eval_cfg, warnings, figures=True)  # PNGs beside metrics.json
        figures = {p.name: p for p in Path(eval_cfg.output_dir).glob("*.png")}
        prefix = "eval" if name == cfg.data.name else f"eval/{name}"
        means = {f"{prefix}/{m}": iv.mean for m, iv in result.overall[cfg.run_name].items() if hasattr(iv, "mean")}
        for logger in loggers:
            logger.log_metrics(means)
        log_summary(loggers, means)
        log_evaluation(loggers, result, None, prefix, figures)  # wandb: Tables and the figures as Images
    return evals


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its children that have ended (DataLoader workers, spaCy
    and launched processes): rank 0's view of what a run costs."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


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
    warnings: Sequence[str] = (),
    train_questions: int | None = None,
    cpu: dict[str, float] | None = None,
) -> list[Path]:
    """File the run in the results store: one entry per evaluated dataset (one, without metrics, if none), with
    the number of questions it trained on (a study report's points name it) and the CPU seconds of its training
    (fit and test) and of its evaluations (``cpu_seconds``: what a study costs, point by point)."""
    absent = object()
    settings = {key: OmegaConf.select(cfg, key, default=absent) for key in KEY_SETTINGS}
    run = {
        "study": cfg.study,
        "run_name": cfg.run_name,
        "family": cfg.family,
        "model": cfg.model._target_,
        "train_data": list(cfg.datamodule.datasets),
        "train_questions": train_questions,
        "cpu_seconds": {k: round(v, 1) for k, v in (cpu or {}).items()},
        "num_parameters": num_parameters(model),
        "num_trainable_parameters": num_parameters(model, trainable_only=True),
        "best_checkpoint": best,
        "warnings": list(warnings),
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
