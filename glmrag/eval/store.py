"""The results store: one folder per run under a study's ``results_dir``, read back by ``glmrag report``.

``train.py`` and ``eval.py`` each file a run as ``<results_dir>/<run id>/``: ``metrics.json`` (the evaluator's,
plus ``per_question``: Recall@2/@5 of every system on every question; ``run``: who, on what data, key settings,
parameters, warnings, CPU time; and ``trainer``: the Trainer's metrics)
and ``config.yaml`` (the resolved config). A folder appears whole, in one rename; a run id already taken gets
``-2``, ``-3``, ...: a later run never overwrites an earlier one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glmrag.eval.outputs import metrics_json
from glmrag.io import atomic_write_text, default_mode

if TYPE_CHECKING:
    from glmrag.eval.result import EvalResult

METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.yaml"
NO_GAIN = "training did not help"
"""The words of the training job's warning when the best checkpoint is no better than the untrained model
(:class:`glmrag.jobs.train.StartScore`), by which a study report tells such runs apart."""


@dataclass(frozen=True)
class StoredRun:
    """One run read back from a results folder."""

    run_id: str
    """The run's folder name."""
    path: Path
    metrics: dict[str, Any]
    """The parsed ``metrics.json``: the evaluator's keys (absent when nothing was evaluated), ``run``, ``trainer``."""

    @property
    def run(self) -> dict[str, Any]:
        return self.metrics.get("run", {})

    @property
    def evaluated(self) -> bool:
        return bool(self.metrics.get("overall"))

    @property
    def warnings(self) -> list[str]:
        """Every warning the run filed, once each: the training job's (:data:`NO_GAIN`), the evaluator's, and
        the headline's (an LLM method's fallbacks)."""
        found = [*self.run.get("warnings", []), *self.metrics.get("warnings", [])]
        found.append((self.metrics.get("headline") or {}).get("warning"))
        return list(dict.fromkeys(w for w in found if w))

    @property
    def training_did_not_help(self) -> bool:
        """The run's best checkpoint was no better on validation than its untrained model."""
        return any(NO_GAIN in w for w in self.warnings)


PER_QUESTION_METRICS = ("recall@2", "recall@5")
"""The per-question scores a stored run keeps (``per_question``), so runs on the same questions can be compared
paired (:mod:`glmrag.eval.study_slopes`)."""


def per_question_scores(result: EvalResult) -> dict[str, Any]:
    """``{"question_ids": [...], metric: {system: [score or None, ...]}}`` of :data:`PER_QUESTION_METRICS` (those
    the evaluation measured), in question order, rounded to 4 decimals (None: undefined, a question without gold
    passages)."""
    out: dict[str, Any] = {"question_ids": list(result.question_ids)}
    for metric in (m for m in PER_QUESTION_METRICS if m in result.metric_names):
        out[metric] = {
            system: [None if row.get(metric) is None else round(float(row[metric]), 4) for row in rows]
            for system, rows in result.per_question.items()
        }
    return out


def run_record(result: EvalResult | None, run: dict[str, Any], trainer: dict[str, float] | None = None) -> dict:
    """The content of a stored ``metrics.json``: the evaluator's metrics and per-question scores (if any), ``run``
    and ``trainer``."""
    record = {**metrics_json(result), "per_question": per_question_scores(result)} if result is not None else {}
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {**record, "run": {**run, "stored_at": stamp}, "trainer": dict(trainer or {})}


def _safe_id(run_id: str) -> str:
    """A folder name that goes back into a command line unquoted (``results_dir=``): path separators, Hydra's
    special characters (``=``, ``,``, ``:``, brackets) and other odd ones become ``_``."""
    return re.sub(r"[^A-Za-z0-9._@+-]", "_", run_id).lstrip(".") or "run"


def write_run(results_dir: str | os.PathLike[str], run_id: str, record: dict, config_yaml: str) -> Path:
    """Store one run as ``<results_dir>/<run_id>[-n]/{metrics.json, config.yaml}``; returns its folder.

    The folder appears in one rename, complete; an existing folder of the same id is never touched.
    """
    root = Path(results_dir)
    root.mkdir(parents=True, exist_ok=True)
    base = _safe_id(run_id)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{base}.", suffix=".tmp"))
    try:
        atomic_write_text(tmp / CONFIG_FILE, config_yaml)
        atomic_write_text(tmp / METRICS_FILE, json.dumps(record, indent=2, allow_nan=False) + "\n")
        os.chmod(tmp, default_mode(directory=True))
        for n in range(1, 10_000):
            target = root / (base if n == 1 else f"{base}-{n}")
            if target.exists():
                continue
            try:
                os.rename(tmp, target)  # atomic; fails on a non-empty folder another writer just made
                return target
            except OSError:
                if not target.exists():
                    raise
        raise FileExistsError(f"{root}: 9,999 runs are already named {base!r}; use another run_name")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def read_runs(results_dir: str | os.PathLike[str]) -> list[StoredRun]:
    """Every complete run under ``results_dir``, sorted by folder name (hidden temporary folders skipped)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder {root} does not exist; train.py and eval.py write into results_dir")
    runs = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        path = folder / METRICS_FILE
        if not path.is_file():
            continue
        try:
            metrics = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON ({err}); delete the run folder or rerun it") from err
        runs.append(StoredRun(folder.name, folder, metrics))
    return runs
