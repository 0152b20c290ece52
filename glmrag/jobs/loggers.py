"""A training job's loggers: the wandb logger and its mode, what they get after fitting, how they are let go.

* :func:`wandb_logger` (``configs/logger/wandb.yaml``): offline unless the user is logged in to wandb.
* :func:`closing`: a job's loggers, finished when the job ends, also when it raises; wandb keeps one run per
  process, so without it the next job of a Hydra multirun (or GFM-RAG's fine-tuning after its pretraining)
  logged into this job's run.
* :func:`log_evaluation`: the evaluator's table and per-question rankings as ``wandb.Table``, its figures as
  ``wandb.Image``, and the best checkpoint (an artifact online, a copy in the run folder offline).

Loggers other than :class:`~lightning.pytorch.loggers.WandbLogger` get nothing here but ``finalize``.
"""

from __future__ import annotations

import logging
import netrc
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from lightning.pytorch.loggers import Logger, WandbLogger

from glmrag.eval import EvalResult

log = logging.getLogger(__name__)

TABLE_KEY = "eval/table"
RANKINGS_KEY = "eval/rankings"
CHECKPOINT_ARTIFACT = "best_checkpoint"
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


def close_loggers(loggers: Sequence[Logger], status: str = "success") -> None:
    """Finalize every logger with ``status`` (``success`` or ``failed``) and finish the wandb run, so the next
    job in this process starts its own; a failed job's run is finished with exit code 1 (wandb: "failed")."""
    try:
        for logger in loggers:
            try:
                logger.finalize(status)
            except Exception:
                if status == "success":
                    raise
                # the job's own error is the one to see; this one is only logged
                log.exception("%s could not finalize after the job failed", type(logger).__name__)
    finally:  # a logger that fails to finalize must not keep the wandb run open for the next job
        if any(isinstance(lg, WandbLogger) for lg in loggers):
            import wandb

            if wandb.run is not None:
                wandb.finish(exit_code=0 if status == "success" else 1)


@contextmanager
def closing(loggers: Sequence[Logger]) -> Iterator[Sequence[Logger]]:
    """``loggers`` for the body of a ``with``; closed by :func:`close_loggers` when it ends, ``failed`` if it raised."""
    status = "failed"
    try:
        yield loggers
        status = "success"
    finally:
        close_loggers(loggers, status)


def table_rows(result: EvalResult) -> tuple[list[str], list[list]]:
    """Columns and rows of the evaluator's table: system, reference flag, then each metric's mean."""
    columns = ["system", "reference", *result.metric_names]
    rows = [
        [s, s == result.reference, *[getattr(result.overall[s].get(m), "mean", None) for m in result.metric_names]]
        for s in result.systems
    ]
    return columns, rows


def ranking_rows(result: EvalResult) -> tuple[list[str], list[list]]:
    """Columns and rows of the per-question rankings: system, question id, top passages, each metric."""
    metrics = [m for m in result.metric_names if m.startswith(("recall@", "mrr"))]
    columns = ["system", "question_id", "top_passages", *metrics]
    rows = [
        [s, r["question_id"], " ".join(r["top_passages"]), *[r.get(m) for m in metrics]]
        for s, per_q in result.per_question.items()
        for r in per_q
    ]
    return columns, rows


def log_evaluation(
    loggers: Sequence[Logger],
    result: EvalResult | None,
    best: str | None,
    prefix: str = "eval",
    figures: Mapping[str, Path] | None = None,
) -> None:
    """Log the evaluation's tables, its ``figures`` (file name -> PNG path) and the best checkpoint to every
    WandbLogger (see the module docstring); a figure's key is ``<prefix>/<file name without .png>``."""
    for logger in loggers:
        if not isinstance(logger, WandbLogger):
            continue
        if result is not None:
            for key, (columns, rows) in ((TABLE_KEY, table_rows(result)), (RANKINGS_KEY, ranking_rows(result))):
                logger.log_table(key=key.replace("eval", prefix, 1), columns=columns, data=rows)
        for name, path in (figures or {}).items():
            logger.log_image(key=f"{prefix}/{Path(name).stem}", images=[str(path)], caption=[name])
        if best:
            keep_checkpoint(logger, best)


def log_summary(loggers: Sequence[Logger], values: Mapping[str, float | str | None]) -> None:
    """``values`` into every WandbLogger's run summary, where a run's final metrics are read (the runs table,
    sweeps, ``wandb.Api``); an offline run carries them to the server with ``wandb sync``."""
    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger.experiment.settings.mode != "disabled":
            logger.experiment.summary.update(dict(values))


def keep_checkpoint(logger: WandbLogger, path: str) -> None:
    """The best checkpoint as an artifact (online), else copied into the run's folder (offline)."""
    import wandb

    run = logger.experiment
    if run.settings.mode == "disabled":
        return
    if run.settings.mode == "online":
        artifact = wandb.Artifact(CHECKPOINT_ARTIFACT, type="model")
        artifact.add_file(path)
        run.log_artifact(artifact)
        return
    target = Path(run.dir) / "checkpoints" / Path(path).name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, target)
    log.info("offline wandb run: best checkpoint copied to %s (wandb sync uploads it)", target)
