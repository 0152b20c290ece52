"""Figures of a study report, as PNG files (matplotlib's Agg canvas; no display, no pyplot state).

- :func:`plot_scaling`: Recall@2 against the parameter count, one line per family (GLM-RAG Fig. 6);
- :func:`plot_sweep`: Recall@2 against the one value a study sweeps (Table 3's triplet budget, Fig. 7's
  training questions), one line per family; a family with one run and no such value (the unrestricted
  GFM-RAG* of Table 3) is a dashed horizontal line;
- :func:`plot_breakdown`: Recall@2 by number of hops or of supporting passages (the evaluator's
  breakdowns), one line per run's trained system, the baselines of the first run dashed;
- :func:`evaluation_figures`: those breakdowns for one evaluation (a training job's, which logs them to
  wandb as images: :func:`glmrag.jobs.loggers.log_figures`).

Every series has a colour and a marker of its own (:func:`series_style`; baselines too, never a
shared grey), and breakdown lines are dodged sideways a little so that equal values do not hide
one series under another.

Each returns the path it wrote, or None when the runs hold nothing to draw.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from glmrag.eval.outputs import _label, metrics_json
from glmrag.eval.result import EvalResult
from glmrag.eval.store import StoredRun
from glmrag.eval.study_tables import MISSING, Row, _sort_key

METRIC = "recall@2"
FIGURE_GROUPINGS = ("hops", "n_supporting")
"""The breakdowns drawn for a study report and for one evaluation (GLM-RAG Fig. 4's hop buckets, and the
number of supporting passages)."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
DODGE = 0.06
"""Sideways shift between neighbouring series of a breakdown, in bucket widths."""


def series_style(i: int) -> dict:
    """Colour and marker of the ``i``-th series: tab10 then tab20b colours, cycling markers."""
    colours = [*colormaps["tab10"].colors, *colormaps["tab20b"].colors]
    return {"color": colours[i % len(colours)], "marker": MARKERS[i % len(MARKERS)]}


def _save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` as a PNG whose text chunk ``labels`` holds the legend's labels as JSON, so a test or a
    script can tell which runs a figure draws (:func:`figure_labels`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    labels = [label for ax in fig.axes for label in ax.get_legend_handles_labels()[1]]
    fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"labels": json.dumps(labels)})
    return path


def figure_labels(path: str | os.PathLike[str]) -> list[str]:
    """The legend labels a figure of this module recorded in its PNG (an empty list for another PNG)."""
    from PIL import Image

    with Image.open(path) as image:
        return json.loads(image.text.get("labels", "[]"))


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
    for i, (family, rs) in enumerate(families.items()):
        rs = sorted(rs, key=lambda r: r.num_parameters)
        x = [r.num_parameters for r in rs]
        y = [100 * r.overall[metric].mean for r in rs]
        err = [[100 * (r.overall[metric].mean - r.overall[metric].low) for r in rs],
               [100 * (r.overall[metric].high - r.overall[metric].mean) for r in rs]]  # fmt: skip
        ax.errorbar(x, y, yerr=err, capsize=3, label=family, **series_style(i))
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
    for i, (family, rs) in enumerate(families.items()):
        style = series_style(i)
        points = sorted(swept[family], key=lambda r: position[r.values[key]])
        if points:
            x = [position[r.values[key]] for r in points]
            ax.plot(x, [100 * r.overall[metric].mean for r in points], label=family, **style)
            low, high = ([100 * getattr(r.overall[metric], e) for r in points] for e in ("low", "high"))
            ax.fill_between(x, low, high, alpha=0.15, color=style["color"])
        elif len(rs) == 1:  # a reference without the swept value
            mean = 100 * rs[0].overall[metric].mean
            ax.axhline(mean, linestyle="--", color=style["color"], label=f"{family} (no {key}, dashed)")
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

    first = runs[0].metrics
    baselines = [s for s in first["systems"] if s != first["reference"]]
    n_series = len(runs) + len(baselines)

    def line(i: int, by: dict, **style) -> None:
        shift = (i - (n_series - 1) / 2) * DODGE
        pts = sorted((x[b] + shift, 100 * v[metric]) for b, v in by.items() if v.get(metric) is not None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], **series_style(i), **style)

    for i, run in enumerate(runs):
        by_system = run.metrics["breakdowns"][grouping]
        line(i, by_system.get(run.metrics["reference"], {}), label=run.run_id)
    for j, system in enumerate(baselines):
        line(len(runs) + j, first["breakdowns"][grouping].get(system, {}), linestyle="--", label=f"{system} (dashed)")
    n = {b: v.get("n") for b, v in first["breakdowns"][grouping].get(first["reference"], {}).items()}
    ax.set_xticks(list(x.values()), [f"{b}\n(n={n[b]})" if n.get(b) else str(b) for b in buckets])
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def evaluation_figures(result: EvalResult, folder: str | os.PathLike[str]) -> dict[str, Path]:
    """``recall_by_<grouping>.png`` in ``folder`` for each of :data:`FIGURE_GROUPINGS` that ``result`` holds:
    the reference system's line and every other system's dashed; returns the written paths by file name."""
    recalls = [m for m in result.metric_names if m.startswith("recall@")]
    metric = METRIC if METRIC in recalls else next(iter(recalls), None)
    if metric is None:
        return {}
    run = StoredRun(run_id=str(result.reference or result.systems[0]), path=Path(folder), metrics=metrics_json(result))
    figures = {
        f"recall_by_{g}.png": plot_breakdown([run], g, Path(folder) / f"recall_by_{g}.png", metric)
        for g in FIGURE_GROUPINGS
    }
    return {name: path for name, path in figures.items() if path is not None}
