"""Figures of a study report, as PNG files (matplotlib's Agg canvas; no display, no pyplot state).

- :func:`plot_scaling`: Recall@2 against the parameter count, one line per family (GLM-RAG Fig. 6);
- :func:`plot_sweep`: Recall@2 against the one value a study sweeps (Table 3's triplet budget, Fig. 7's
  training questions), one line per family; a family with one run and no such value (the unrestricted
  GFM-RAG* of Table 3) is a dashed horizontal line;
- :func:`plot_breakdown`: Recall@2 by number of hops or of supporting passages (the evaluator's
  breakdowns), one line per run's trained system, the baselines of the first run dashed.

Each returns the path it wrote, or None when the runs hold nothing to draw.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from glmrag.eval.report import _label
from glmrag.eval.store import StoredRun
from glmrag.eval.study_report import MISSING, Row, _sort_key

METRIC = "recall@2"


def _save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def _axes(title: str, xlabel: str, metric: str):
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{_label(metric)} (×100)")
    ax.grid(alpha=0.3)
    return fig, ax


def _by_family(rows: Sequence[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        if r.reference and METRIC in r.overall:
            out.setdefault(r.family, []).append(r)
    return out


def plot_scaling(rows: Sequence[Row], path: str | os.PathLike[str], metric: str = METRIC) -> Path | None:
    """Recall against parameters (log scale) with 95% CIs, when some family has two or more sizes."""
    families = {f: [r for r in rs if r.num_parameters] for f, rs in _by_family(rows).items()}
    if not any(len({r.num_parameters for r in rs}) > 1 for rs in families.values()):
        return None
    fig, ax = _axes("Model scaling (GLM-RAG Fig. 6)", "parameters", metric)
    for family, rs in families.items():
        rs = sorted(rs, key=lambda r: r.num_parameters)
        x = [r.num_parameters for r in rs]
        y = [100 * r.overall[metric].mean for r in rs]
        err = [[100 * (r.overall[metric].mean - r.overall[metric].low) for r in rs],
               [100 * (r.overall[metric].high - r.overall[metric].mean) for r in rs]]  # fmt: skip
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=family)
    ax.set_xscale("log")
    ax.legend()
    return _save(fig, path)


def plot_sweep(rows: Sequence[Row], key: str, path: str | os.PathLike[str], metric: str = METRIC) -> Path | None:
    """Recall against the swept value ``key``: numbers on a numeric axis, other values in sorted order."""
    families = _by_family(rows)
    swept = {f: [r for r in rs if r.values.get(key, MISSING) != MISSING] for f, rs in families.items()}
    if not any(swept.values()):
        return None
    values = sorted({r.values[key] for rs in swept.values() for r in rs}, key=_sort_key)
    numeric = all(_sort_key(v)[0] == 1 for v in values)
    position = {v: float(v) if numeric else i for i, v in enumerate(values)}
    fig, ax = _axes(f"{_label(metric)} by {key}", key, metric)
    for family, rs in families.items():
        points = sorted(swept[family], key=lambda r: position[r.values[key]])
        if points:
            x = [position[r.values[key]] for r in points]
            ax.plot(x, [100 * r.overall[metric].mean for r in points], marker="o", label=family)
            low, high = ([100 * getattr(r.overall[metric], e) for r in points] for e in ("low", "high"))
            ax.fill_between(x, low, high, alpha=0.15)
        elif len(rs) == 1:  # a reference without the swept value
            ax.axhline(100 * rs[0].overall[metric].mean, linestyle="--", color="gray", label=f"{family} (no {key})")
    if not numeric:
        ax.set_xticks(list(position.values()), [str(v) for v in values])
    ax.legend()
    return _save(fig, path)


def plot_breakdown(
    runs: Sequence[StoredRun], grouping: str, path: str | os.PathLike[str], metric: str = METRIC
) -> Path | None:
    """Recall by bucket of ``grouping`` (``hops``, ``n_supporting``, ``density``) for every run."""
    runs = [r for r in runs if grouping in r.metrics.get("breakdowns", {})]
    if not runs:
        return None
    label = {"hops": "hops", "n_supporting": "supporting passages", "density": "neighbourhood density"}
    fig, ax = _axes(f"{_label(metric)} by {label.get(grouping, grouping)}", label.get(grouping, grouping), metric)
    buckets = sorted(
        {b for run in runs for by in run.metrics["breakdowns"][grouping].values() for b in by}, key=_sort_key
    )
    if grouping == "density":  # terciles, in order
        buckets = sorted(buckets, key=lambda b: ("low", "mid", "high").index(b) if b in ("low", "mid", "high") else 3)
    x = {b: i for i, b in enumerate(buckets)}

    def line(by: dict, **style) -> None:
        pts = [(x[b], 100 * v[metric]) for b, v in by.items() if v.get(metric) is not None]
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", **style)

    for run in runs:
        by_system = run.metrics["breakdowns"][grouping]
        line(by_system.get(run.metrics["reference"], {}), label=run.run_id)
    first = runs[0].metrics
    baselines = [s for s in first["systems"] if s != first["reference"]]
    for system, style in zip(baselines, ("--", ":", "-.") * len(baselines), strict=False):
        line(first["breakdowns"][grouping].get(system, {}), linestyle=style, color="gray", label=system)
    n = {b: v.get("n") for b, v in first["breakdowns"][grouping].get(first["reference"], {}).items()}
    ax.set_xticks(list(x.values()), [f"{b}\n(n={n[b]})" if n.get(b) else str(b) for b in buckets])
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)
