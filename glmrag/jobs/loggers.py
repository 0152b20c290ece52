"""What a training job hands its loggers after fitting, and how it lets them go.

* :func:`closing`: a job's loggers, finished when the job ends, also when it raises (the
  lightning-hydra-template's ``close_loggers`` habit in a ``finally``). wandb keeps one global run per
  process: without this, jobs 2..N of a Hydra multirun, and GFM-RAG's fine-tuning after its
  KG-completion pretraining, logged into the first job's run, and a job that failed left its run
  active for the next one (Lightning's own teardown finalizes a WandbLogger but never finishes its run).
* :func:`log_evaluation`: the evaluator's table (one row per system) and the per-question rankings
  as ``wandb.Table``, its figures (PNG files the job wrote) as ``wandb.Image``, and the best
  checkpoint: an artifact when the run is online, a copy in the run's own folder when offline
  (``wandb sync`` uploads that folder later; an offline run keeps its images under
  ``files/media/images``).

Loggers other than :class:`~lightning.pytorch.loggers.WandbLogger` get nothing here but
``finalize``; wandb is imported only when a WandbLogger is in use.
"""

from __future__ import annotations

import logging
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
