"""A training run's checkpoint folder: which checkpoint ``ckpt_path=last`` resumes, and one live run per folder.

Checkpoints go to ``checkpoint_dir`` (``checkpoints/<run_name>/<run_id>``). A stopped run resumes from its
folder's newest :data:`RESUMABLE` checkpoint (:func:`resume_folder`); :func:`run_folder_lock` keeps a second
live run out of a folder whose ``last.ckpt`` it would replace.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from glmrag.io import LockTimeout, file_lock, local_checkpoint
from glmrag.jobs.config_path import SEPARATORS
from glmrag.models.checkpointing import whole_checkpoint

log = logging.getLogger(__name__)

RESUMABLE = ("last.ckpt", "hpc_ckpt_*.ckpt")
"""A run folder's resumable checkpoints: the last epoch or a SIGTERM (``last.ckpt``), a SLURM requeue's."""
LENGTH_PARTS = ("max_epochs", "max_steps")
"""Run-name parts (from ``trainer.max_epochs=`` / ``trainer.max_steps=`` overrides) that only say how long a run
trains: ``ckpt_path=last`` with ``trainer.max_epochs`` raised continues the run named with the old value."""


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


def _name_parts(name: str, prefix: str) -> frozenset[str] | None:
    """The ``key@value`` parts of run name ``name`` after ``prefix`` (:func:`~glmrag.jobs.config_path.run_suffix`),
    those of :data:`LENGTH_PARTS` left out; None when ``name`` is not ``prefix`` with a suffix."""
    if name == prefix:
        return frozenset()
    if not name.startswith(f"{prefix}-"):
        return None
    key_value, between = SEPARATORS
    parts = name[len(prefix) + 1 :].split(between)
    return frozenset(p for p in parts if p.partition(key_value)[0] not in LENGTH_PARTS)


def extended_runs(cfg: DictConfig) -> list[Path]:
    """The run-name folders beside this run's (``checkpoints/<name>``) whose names differ from ``cfg.run_name``
    only in :data:`LENGTH_PARTS`: the runs that this one, trained longer or shorter, continues. Empty when
    ``checkpoint_dir`` is not ``.../<run_name>/<run_id>`` or the run name is not ``<model_name>-<data.name>...``
    (set by hand)."""
    own = Path(cfg.checkpoint_dir).parent
    prefix = f"{OmegaConf.select(cfg, 'model_name')}-{OmegaConf.select(cfg, 'data.name')}"
    want = _name_parts(str(cfg.run_name), prefix)
    if own.name != cfg.run_name or want is None or not own.parent.is_dir():
        return []
    return sorted(p for p in own.parent.iterdir() if p.is_dir() and p != own and _name_parts(p.name, prefix) == want)


def _newest_run(names: list[Path]) -> Path | None:
    """The run folder (``<name>/<run_id>``) with the newest resumable checkpoint under any of ``names``."""
    runs = [(t, p) for name in names for p in name.iterdir() if p.is_dir() and (t := _newest_checkpoint_time(p))]
    return max(runs)[1] if runs else None


def resume_folder(cfg: DictConfig) -> DictConfig:
    """``cfg`` set up to resume: ``ckpt_path=last`` becomes the newest checkpoint of :func:`last_run_folder`,
    else of a run whose name differs only in ``max_epochs`` / ``max_steps`` (:func:`extended_runs`: a resume
    that raises ``trainer.max_epochs`` renames the run), with a warning naming it; with neither, a warning that
    there is nothing to resume and a fresh start (``ckpt_path`` null: the first of a requeued job's starts).
    ``checkpoint_dir`` becomes the resumed checkpoint's folder, so the run writes beside it and ModelCheckpoint
    restores its best score (Lightning drops it, with a warning, when ``dirpath`` changed). A run stopped in
    GFM-RAG's pretraining resumes that stage (:func:`run_train`)."""
    if cfg.get("ckpt_path") == "last":
        folder = last_run_folder(cfg.checkpoint_dir)
        if folder is None and (folder := _newest_run(others := extended_runs(cfg))) is not None:
            log.warning(
                "ckpt_path=last: no checkpoint of run %s; resuming %s, the newest run whose name differs only in %s "
                "(checkpoints stay in its folder; results are filed under %s)",
                cfg.run_name,
                folder,
                "/".join(LENGTH_PARTS),
                cfg.run_name,
            )
        elif folder is None:
            searched = [Path(cfg.checkpoint_dir).parent, *others]
            log.warning(
                "ckpt_path=last: NOTHING TO RESUME: no checkpoint of run %s in %s; starting a NEW run. A run started "
                "with other overrides has another name (only %s may differ): pass ckpt_path=<its last.ckpt> to "
                "resume it",
                cfg.run_name,
                ", ".join(map(str, searched)),
                "/".join(LENGTH_PARTS),
            )
            return OmegaConf.merge(cfg, {"ckpt_path": None})
        else:
            log.info("ckpt_path=last: resuming the run in %s", folder)
        return OmegaConf.merge(cfg, {"checkpoint_dir": str(folder), "ckpt_path": resume_checkpoint(folder)})
    if not cfg.get("ckpt_path"):
        return cfg
    folder = str(local_checkpoint(cfg.ckpt_path).resolve().parent)
    if Path(cfg.checkpoint_dir).resolve() != Path(folder):
        log.info("resuming: checkpoints go to %s, the folder of ckpt_path (not %s)", folder, cfg.checkpoint_dir)
    return OmegaConf.merge(cfg, {"checkpoint_dir": folder})


class RunFolderBusy(RuntimeError):
    """Another live run writes the same checkpoint folder (its ``last.ckpt`` would replace this run's), or the
    folder's lock cannot be taken, so that no one could tell."""


@contextlib.contextmanager
def run_folder_lock(cfg: DictConfig) -> Iterator[None]:
    """Hold ``<checkpoint_dir>``'s lock (a file beside the real folder, symlinks resolved) while
    the job runs; raise :class:`RunFolderBusy` when another live run holds it or when the lock file cannot be
    opened. Only the launching process (rank 0) takes it: the DDP ranks it starts write the same folder by
    design."""
    if rank_zero_only.rank != 0:
        yield
        return
    folder = Path(cfg.checkpoint_dir).resolve()  # two spellings of one folder (a symlink) share one lock
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = folder.parent / f".{folder.name}.lock"
    try:
        with file_lock(lock, timeout=0, what="the run folder lock") as locked:
            if not locked:
                raise RunFolderBusy(
                    f"checkpoint_dir={cfg.checkpoint_dir}: its lock file {lock} cannot be opened (a folder of that "
                    "name, or no write access there), so a second run in the folder could not be refused; remove "
                    "it or give this run another folder (run_id=... or checkpoint_dir=...)"
                )
            yield
    except LockTimeout as err:
        raise RunFolderBusy(
            f"checkpoint_dir={folder} belongs to a run that is still going ({err}); two runs there would replace "
            "each other's last.ckpt. Give this run its own folder (run_id=... or checkpoint_dir=...), or wait"
        ) from None
