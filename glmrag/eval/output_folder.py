"""An evaluation's output folder holds the files of one run, never a mix of two.

A run writes into a staging folder inside ``output_dir`` (``incomplete-<time>-<pid>``, :func:`staged_outputs`). When
it succeeds, :func:`commit` moves its files in under a journal: ``.commit.json`` names the staging folder, the
new files and the previous run's files (from the manifest ``.outputs.json``); each new file is renamed over its
old one, the previous run's files that the new run did not write are removed, the manifest is rewritten, then
the journal deleted. A kill at any point leaves either no journal (the previous run's files, untouched) or the
journal, which the next run or reader completes (:func:`settle`): the folder then holds the new run's files.

A run that fails leaves the previous run's files as they were and its own (the rankings of the systems that
finished) in its staging folder, which the error and the log name; :func:`settle` keeps the staging folder of a
killed run likewise and removes it when it holds no file. Files that no run wrote (a user's notes) are never
touched.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from glmrag.io import atomic_write_text, file_lock, fsync_dir, process_alive

log = logging.getLogger(__name__)

MANIFEST = ".outputs.json"
"""The files of the run the folder holds (``{"files": [...], "run": <staging name>}``)."""
JOURNAL = ".commit.json"
"""A commit in progress: ``{"staging": ..., "files": [...], "previous": [...]}``."""
LOCK = ".outputs.lock"
STAGING_PREFIX = "incomplete-"
LEGACY_FILES = ("metrics.json", "per_question.jsonl", "results.md", "rankings.jsonl")
"""What a run wrote before manifests existed (with its ``recall_by_*.png``): a folder without a manifest holds these."""


@contextlib.contextmanager
def staged_outputs(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh staging folder inside ``folder`` for one run's files, committed as a set when the block ends
    without an error; after an error (or Ctrl+C) ``folder`` keeps the previous run's files, and the staging
    folder this run's (named in the log; removed when it holds none)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    settle(folder)
    staging = folder / f"{STAGING_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        if _keep_partial(staging):
            log.warning("this run's partial outputs are in %s; %s holds the previous run's files", staging, folder)
        raise
    commit(folder, staging)


def commit(folder: Path, staging: Path) -> list[Path]:
    """Move the files of ``staging`` into ``folder`` as one set (module docstring); returns their new paths."""
    with file_lock(folder / LOCK, what=f"the output folder {folder}"):
        files = sorted(p.name for p in staging.iterdir() if p.is_file() and not p.name.startswith("."))
        journal = {"staging": staging.name, "files": files, "previous": _manifest_files(folder)}
        atomic_write_text(folder / JOURNAL, json.dumps(journal, indent=1) + "\n")
        _finish(folder, journal)
    return [folder / name for name in files]


def settle(folder: str | os.PathLike[str]) -> None:
    """Complete a commit that a kill interrupted, remove the staging folders of dead runs that hold no file (and
    the temp files a killed writer left); a read-only folder is left as it is."""
    folder = Path(folder)
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        return
    with file_lock(folder / LOCK, what=f"the output folder {folder}"):
        journal_path = folder / JOURNAL
        if journal_path.is_file():
            _finish(folder, json.loads(journal_path.read_text()))
        for staging in folder.glob(f"{STAGING_PREFIX}*"):
            pid = staging.name.rsplit("-", 1)[-1]
            if staging.is_dir() and pid.isdigit() and not process_alive(int(pid)):
                _keep_partial(staging)
        for name in (*LEGACY_FILES, MANIFEST, JOURNAL):
            for tmp in folder.glob(f".{name}.*.tmp"):  # atomic_write_stream's temp files
                tmp.unlink(missing_ok=True)


def output_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The files of the run ``folder`` holds (its manifest), after completing an interrupted commit."""
    folder = Path(folder)
    settle(folder)
    return [folder / name for name in _manifest_files(folder)]


def _finish(folder: Path, journal: dict) -> None:
    """Apply ``journal`` (idempotent, so a replay after a kill completes it), then delete it."""
    staging = folder / journal["staging"]
    for name in journal["files"]:
        if (staging / name).exists():  # else moved by the interrupted attempt
            os.replace(staging / name, folder / name)
    for name in set(journal["previous"]) - set(journal["files"]):
        (folder / name).unlink(missing_ok=True)
    manifest = {"files": journal["files"], "run": journal["staging"]}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    fsync_dir(folder)
    (folder / JOURNAL).unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)


def _manifest_files(folder: Path) -> list[str]:
    """The files of the run ``folder`` holds: its manifest's, or for a folder written before manifests, the
    names such a run wrote."""
    path = folder / MANIFEST
    if path.is_file():
        return list(json.loads(path.read_text())["files"])
    legacy = [name for name in LEGACY_FILES if (folder / name).is_file()]
    return legacy + sorted(p.name for p in folder.glob("recall_by_*.png")) if legacy else []


def _keep_partial(staging: Path) -> bool:
    """Whether a failed or dead run's staging folder holds files worth keeping; it is removed when not, and its
    temp files always."""
    for tmp in staging.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    if any(staging.iterdir()):
        return True
    staging.rmdir()
    return False
