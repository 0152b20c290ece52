"""A study's tables: the runs of one results folder (:mod:`glmrag.eval.store`) side by side, Recall@2/@5 with CIs.

- the **paper table** (GLM-RAG Tables 1, 3, 16, 19): a row per value the study varies within a family
  (:func:`swept_keys`), a column per family (``family`` in the run's config);
- the **runs table**: every system of every run, the trained one first (``(ref)``), its baselines with their
  App. H markers against it, parameter count, time per question (Table 7), LLM fallback shares and
  ``(= system)`` marks from each run's ``metrics.json`` headline.

Markers are each run's own (paired tests on the same questions); runs are not tested against each other.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from glmrag.eval.outputs import _cell, _label
from glmrag.eval.significance import Interval
from glmrag.eval.store import NO_GAIN, StoredRun
from glmrag.eval.traces import fallback_cell

METRICS = ("recall@2", "recall@5")
SYSTEM_KEYS = ("system", "experiment")
"""Override keys that choose the system or the study: their values name families, not rows."""
LABELS = {"data": "train data", "eval_data": "test data", "data.name": "train data"}
MISSING = "–"
NO_GAIN_MARK = "(untrained)"
"""Marks a paper-table cell whose run's training did not help (:data:`~glmrag.eval.store.NO_GAIN`)."""
BOOKKEEPING_KEYS = (
    "logger",
    "output_dir",
    "results_dir",
    "checkpoint_dir",
    "run_id",
    "study",
    "run_name",
    "hydra",
    "ckpt_path",
    "evaluate",
    "test",
    "quiet",
)
"""Config keys that say where a run is written or logged (or resumed from), or which of its steps run (the
evaluation after training, the test step, progress lines), never what it measures: never a swept column here,
never part of a run name (:mod:`glmrag.jobs.config_path`)."""


@dataclass
class Row:
    """One system of one stored run."""

    run_id: str
    system: str
    reference: bool
    family: str
    eval_data: str
    values: dict[str, Any]
    """The run's swept values (see :func:`swept_keys`); empty for a baseline."""
    overall: dict[str, Interval]
    markers: dict[str, str] = field(default_factory=dict)
    num_parameters: int | None = None
    num_trainable_parameters: int | None = None
    """Parameters the run trained (a GLM with frozen layers trains fewer than it holds)."""
    ms_per_question: float | None = None
    fallbacks: dict[str, dict] | None = None
    """Decision -> ``{"fell_back", "of", "unit"}`` of an LLM method (``metrics.json`` headline); None otherwise."""
    identical_to: str | None = None
    """The system of the same run whose rankings this one's equal on every question."""
    train_questions: int | None = None
    """The questions the run trained on (the trained system's row; None for a baseline or an older run)."""
    no_gain: bool = False
    """The run's training did not help (its trained system's row): the point measures its untrained model."""
    cpu_seconds: dict[str, float] | None = None
    """CPU seconds of the run's ``train`` (fit and test) and ``evaluation`` (its trained system's row; None for a
    baseline, an evaluation-only run or an older run)."""


def overrides(run: StoredRun) -> dict[str, str]:
    """The run's command-line overrides as key -> value (``+``/``++`` prefixes dropped)."""
    pairs = (o.partition("=") for o in run.run.get("overrides", []))
    return {key.lstrip("+~"): value for key, sep, value in pairs if sep}


def family_of(run: StoredRun) -> str:
    """The curve or column a run belongs to: its config's ``family``, else its trained system."""
    return str(run.run.get("family") or run.metrics.get("reference") or run.run_id)


def _value(run: StoredRun, key: str) -> Any:
    """A swept value of a run: its override, its evaluated dataset, or a recorded setting; MISSING if none."""
    if key == "eval_data":
        return run.run.get("eval_data", MISSING)
    found = overrides(run).get(key, run.run.get("settings", {}).get(key, MISSING))
    return MISSING if found is None else found


def _varies_within_a_family(runs: Sequence[StoredRun], key: str, recorded_only: bool = False) -> bool:
    """Whether ``key`` takes two values within one family; ``recorded_only``: among the runs that record
    it (a setting added after older runs were stored does not vary by being absent from them)."""
    families: dict[str, set[str]] = {}
    for run in runs:
        value = _value(run, key)
        if not (recorded_only and value is MISSING):
            families.setdefault(family_of(run), set()).add(repr(value))
    return any(len(values) > 1 for values in families.values())


def _bookkeeping(key: str) -> bool:
    return key.replace("/", ".").split(".")[0].lstrip("@") in BOOKKEEPING_KEYS


def swept_keys(runs: Sequence[StoredRun]) -> list[str]:
    """What the study varies within a system family: the swept overrides (and the test set), else the
    one numeric setting that varies (e.g. ``model.max_triplets`` when each budget is its own system)."""
    keys = list(dict.fromkeys(k for run in runs for k in overrides(run)))
    keys = [k for k in keys if k.split("/")[0] not in SYSTEM_KEYS and not _bookkeeping(k)] + ["eval_data"]
    found = [k for k in keys if _varies_within_a_family(runs, k)]
    if found:
        return found
    numeric = {
        k
        for run in runs
        for k, v in run.run.get("settings", {}).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    varying = sorted(k for k in numeric if _varies_within_a_family(runs, k, recorded_only=True))
    return varying if len(varying) == 1 else []


def study_rows(runs: Sequence[StoredRun]) -> tuple[list[Row], list[str]]:
    """The rows of the runs table (evaluated runs only) and the swept keys their values are keyed by."""
    runs = [r for r in runs if r.evaluated]
    keys = swept_keys(runs)
    rows = []
    for run in runs:
        m = run.metrics
        markers = {(c["system"], c["metric"]): c["marker"] for c in m.get("significance", [])}
        timing = m.get("settings", {}).get("ms_per_question", {})
        notes = (m.get("headline") or {}).get("systems", {})
        for system in m["systems"]:
            ref = system == m["reference"]
            rows.append(
                Row(
                    run_id=run.run_id,
                    system=system,
                    reference=ref,
                    family=family_of(run) if ref else system,
                    eval_data=str(run.run.get("eval_data", MISSING)),
                    values={k: _value(run, k) for k in keys} if ref else {},
                    overall={k: Interval(**v) for k, v in m["overall"][system].items() if isinstance(v, dict)},
                    markers={metric: markers.get((system, metric), "") for metric in METRICS},
                    num_parameters=run.run.get("num_parameters") if ref else None,
                    num_trainable_parameters=run.run.get("num_trainable_parameters") if ref else None,
                    ms_per_question=timing.get(system),
                    fallbacks=notes.get(system, {}).get("fallbacks"),
                    identical_to=notes.get(system, {}).get("identical_to"),
                    train_questions=run.run.get("train_questions") if ref else None,
                    no_gain=ref and run.training_did_not_help,
                    cpu_seconds=(run.run.get("cpu_seconds") or None) if ref else None,
                )
            )
    return rows, keys


def _sort_key(value: Any) -> tuple:
    """Missing first, then numbers by size, then text."""
    if value == MISSING:
        return (0, 0.0, "")
    try:
        return (1, float(value), "")
    except (TypeError, ValueError):
        return (2, 0.0, str(value))


def paper_table(rows: Sequence[Row], keys: Sequence[str]) -> tuple[list[tuple], list[str], dict]:
    """(row keys sorted, families sorted, {(row key, family): Row}) of the trained systems; a later run
    of the same cell replaces an earlier one (runs are read in folder order)."""
    refs = [r for r in rows if r.reference]
    families = sorted({r.family for r in refs})
    cells = {(tuple(r.values.get(k, MISSING) for k in keys), r.family): r for r in refs}
    row_keys = sorted({rk for rk, _ in cells}, key=lambda rk: [_sort_key(v) for v in rk])
    return row_keys, families, cells


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _params(n: int | None) -> str:
    return MISSING if n is None else f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,}"


def _cpu_minutes(cpu: dict[str, float] | None) -> str:
    """``12.5 + 3.1``: a run's training and evaluation CPU minutes (:data:`MISSING` where not recorded)."""
    if not cpu:
        return MISSING
    return " + ".join(MISSING if cpu.get(k) is None else f"{cpu[k] / 60:.1f}" for k in ("train", "evaluation"))


def study_cpu_minutes(runs: Sequence[StoredRun]) -> tuple[float, float, int] | None:
    """Training and evaluation CPU minutes of the runs' training jobs, and how many jobs: a job's stored runs (one
    per test set) share its CPU seconds and output folder, so each job counts once; None where none recorded them."""
    jobs = {}
    for run in runs:
        if run.evaluated and (cpu := run.run.get("cpu_seconds")):
            jobs.setdefault(run.run.get("output_dir", run.run_id), cpu)
    if not jobs:
        return None
    train, evaluation = (sum(cpu.get(k) or 0.0 for cpu in jobs.values()) / 60 for k in ("train", "evaluation"))
    return train, evaluation, len(jobs)


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def format_study_markdown(runs: Sequence[StoredRun], title: str) -> str:
    """The study report: paper tables (one per metric), the runs table, and the notes a reader needs."""
    rows, keys = study_rows(runs)
    if not rows:
        return f"# {title}\n\nNo evaluated runs.\n"
    row_keys, families, cells = paper_table(rows, keys)
    heads = [LABELS.get(k, k) for k in keys] or ["runs"]
    lines = [f"# {title}", ""]
    for metric in METRICS:
        lines += [
            f"## {_label(metric)}",
            "",
            _md_row(heads + families),
            "|" + "---|" * len(heads) + "---:|" * len(families),
        ]
        for rk in row_keys:
            values = [_fmt(v) for v in rk] or ["all"]
            lines.append(_md_row(values + [_paper_cell(cells.get((rk, f)), metric) for f in families]))
        lines.append("")

    timed = any(r.ms_per_question is not None for r in rows)
    with_llm = any(r.fallbacks is not None for r in rows)
    sized = any(r.train_questions is not None for r in rows)
    costed = any(r.cpu_seconds for r in rows)
    frozen = any(r.num_trainable_parameters not in (None, r.num_parameters) for r in rows)  # issue 52's capacity
    head = ["Run", "System", *heads[: len(keys)], *(["Train q"] if sized else []), "Params"]
    head += ["Trained params"] if frozen else []
    head += [*(_label(m) for m in METRICS)] + (["ms/q"] if timed else [])
    head += ["CPU min (train + eval)"] if costed else []
    lines += [
        "## All runs",
        "",
        _md_row(head + (["LLM fallbacks"] if with_llm else [])),
        "|---|---|" + "---|" * len(keys) + "---:|" * (len(head) - 2 - len(keys)) + ("---|" if with_llm else ""),
    ]
    for r in rows:
        name = f"{r.system} (ref)" if r.reference else r.system
        name += f" (= {r.identical_to})" if r.identical_to else ""
        values = [_fmt(r.values[k]) if r.reference else "" for k in keys]
        scores = [_cell(r.overall.get(m), True) + r.markers[m].replace("*", "\\*") for m in METRICS]
        timing = [MISSING if r.ms_per_question is None else f"{r.ms_per_question:.1f}"] if timed else []
        llm = [fallback_cell(r.fallbacks)] if with_llm else []
        size = [MISSING if r.train_questions is None else str(r.train_questions)] if sized else []
        cost = [_cpu_minutes(r.cpu_seconds)] if costed else []
        params = [_params(r.num_parameters)] + ([_params(r.num_trainable_parameters)] if frozen else [])
        lines.append(_md_row([r.run_id, name, *values, *size, *params, *scores, *timing, *cost, *llm]))

    if cost := study_cpu_minutes(runs):
        train, evaluation, jobs = cost
        lines += [
            "",
            f"CPU time of the study: {train:.1f} min of training and {evaluation:.1f} of evaluation in {jobs} "
            "training jobs (a job tested on several sets, or filed in two studies, counted once).",
        ]

    evaluated = {}
    for run in runs:
        if run.evaluated:
            evaluated.setdefault(str(run.run.get("eval_data", MISSING)), run.metrics["counts"]["evaluated"])
    n_boot = {run.metrics.get("settings", {}).get("n_boot") for run in runs if run.evaluated}
    warned = [(r.run_id, warning) for r in runs if r.evaluated for warning in r.warnings]
    lines += [
        "",
        *(f"**{run_id}: {warning}**  " for run_id, warning in warned),
        *(
            [
                f"{NO_GAIN_MARK}: {NO_GAIN} in that run (its best checkpoint was no better on validation than its "
                "untrained model): the cell measures the untrained model, not what training reached.  "
            ]
            if any(r.no_gain for r in rows)
            else []
        ),
        f"{len(rows)} system rows from {len({r.run_id for r in rows})} evaluated runs; questions with gold passages "
        f"per test set: {', '.join(f'{d} {n}' for d, n in evaluated.items())}. Values ×100; brackets: 95% "
        f"bootstrap CI ({', '.join(str(n) for n in sorted(n_boot, key=str))} resamples).  ",
        "Markers on a baseline row compare it with its run's trained system (ref) on the same questions "
        "(paired bootstrap, Holm-Bonferroni, GLM-RAG App. H): \\*/\\*\\*/\\*\\*\\* = the trained system is "
        "significantly better (p < .05/.01/.001), † = significantly worse. Runs are not tested against each other."
        + ("  \nms/q: a warm retrieve() per question, one-off setup apart (glmrag/eval/timing.py)." if timed else ""),
    ]
    if any(r.identical_to for r in rows):
        lines.append(
            "(= x): the same ranked passages as system x of the same run on every question, so its retrieval "
            "metrics are x's: that row's switch changed nothing on these questions."
        )
    if with_llm:
        lines.append(
            "LLM fallbacks, k/n: on k of the n questions where an LLM decision was made its documented fallback "
            "decided instead; head selection: held-out probes the addressing heads miss (glmrag/eval/traces.py)."
        )
    untested = sorted({r.run_id for r in runs if r.evaluated and r.metrics.get("settings", {}).get("untested_metrics")})
    if untested:
        lines.append(
            f"No markers for {', '.join(untested)}: fewer paired questions than a test needs (metrics.json's "
            "settings.untested_metrics and min_paired)."
        )
    if len(cells) < sum(1 for r in rows if r.reference):
        lines.append("Some cells were run more than once: the paper tables show the last run (by folder name).")
    return "\n".join(lines) + "\n"


def _paper_cell(row: Row | None, metric: str) -> str:
    """A paper-table cell: the value with its CI, marked :data:`NO_GAIN_MARK` when the run's training did not help."""
    return _cell(_get(row, metric), True) + (f" {NO_GAIN_MARK}" if row is not None and row.no_gain else "")


def _get(row: Row | None, metric: str) -> Interval | None:
    return None if row is None else row.overall.get(metric)


def _csv(header: Sequence[str], records: Sequence[Sequence[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(
        ["" if v is None or v == MISSING or (isinstance(v, float) and math.isnan(v)) else v for v in rec]
        for rec in records
    )
    return out.getvalue()


def runs_csv(runs: Sequence[StoredRun]) -> str:
    """The runs table as CSV: one line per (run, system), means and CI bounds as fractions, markers apart, then
    the system it repeats and its LLM fallbacks (empty for none)."""
    rows, keys = study_rows(runs)
    header = ["run", "system", "reference", "family", "eval_data", *keys, "train_questions", "training_did_not_help"]
    header += ["num_parameters", "num_trainable_parameters", "ms_per_question", "cpu_s_train", "cpu_s_evaluation"]
    header += [f"{m}_{part}" for m in METRICS for part in ("mean", "low", "high", "marker")]
    header += ["identical_to", "llm_fallbacks"]
    records = []
    for r in rows:
        rec = [r.run_id, r.system, r.reference, r.family, r.eval_data, *(r.values.get(k, "") for k in keys)]
        rec += [r.train_questions, r.no_gain if r.reference else None, r.num_parameters, r.num_trainable_parameters]
        rec += [r.ms_per_question]
        rec += [(r.cpu_seconds or {}).get(k) for k in ("train", "evaluation")]
        for m in METRICS:
            iv = r.overall.get(m)
            rec += [iv.mean, iv.low, iv.high] if iv else [None] * 3
            rec.append(r.markers[m])
        rec += [r.identical_to, None if r.fallbacks is None else fallback_cell(r.fallbacks)]
        records.append(rec)
    return _csv(header, records)


def paper_csv(runs: Sequence[StoredRun]) -> str:
    """The paper tables as CSV, long form: one line per (swept values, family, metric)."""
    rows, keys = study_rows(runs)
    row_keys, families, cells = paper_table(rows, keys)
    records = []
    for rk in row_keys:
        for family in families:
            row = cells.get((rk, family))
            for m in METRICS:
                iv = _get(row, m)
                if iv is not None:
                    records.append([*rk, family, m, iv.mean, iv.low, iv.high, row.run_id])
    return _csv([*keys, "family", "metric", "mean", "low", "high", "run"], records)
