"""Figures of a study report and of one evaluation, as PNG files (matplotlib's Agg canvas, no pyplot state).

:func:`plot_scaling` draws Recall@2 against the parameter count (GLM-RAG Fig. 6); :func:`plot_sweep` against
the value a study sweeps (Table 3's triplet budget, Fig. 7's training questions); :func:`plot_breakdown`
by bucket of the evaluator's breakdowns (hops, supporting passages), with 95% CIs where the breakdowns
hold them, hollow unjoined markers for buckets of fewer than :data:`SMALL_N` questions, and no second
figure when two groupings put every question in the same bucket (MuSiQue: hops = supporting passages).
:func:`evaluation_figures` draws those for one evaluation. Every series has a colour and marker of its
own (:func:`series_style`), dodged sideways a little so equal values do not hide one another. Beside a study's
curves: each run's untrained model (dashed, the family's colour), dense retrieval (dotted grey), each point's
number of training questions (``n=...``), and points whose training did not help drawn hollow and named in the
legend. Each returns the path it wrote, or None when there is nothing to draw.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from glmrag.eval.breakdowns import group_means, row_bucket
from glmrag.eval.outputs import _label, metrics_json
from glmrag.eval.result import EvalResult
from glmrag.eval.store import StoredRun
from glmrag.eval.study_tables import MISSING, Row, _sort_key

METRIC = "recall@2"
TRAIN_FRACTION = "datamodule.train_fraction"
"""The key a data-scaling study sweeps; its figure's x axis is the number of training questions instead."""
FIGURE_GROUPINGS = ("hops", "n_supporting")
"""The breakdowns drawn for a study report and for one evaluation (GLM-RAG Fig. 4's hop buckets, and the
number of supporting passages)."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
DODGE = 0.06
"""Sideways shift between neighbouring series of a breakdown, in bucket widths."""
SMALL_N = 10
"""Buckets of fewer questions are drawn hollow and not joined to their neighbours (engineering choice: below
about ten questions a bucket's mean and its bootstrap CI say little)."""


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


def _family_label(family: str, points: Sequence[Row]) -> str:
    """The legend label of a family's curve: says when its training did not help at some or every point."""
    if points and all(r.no_gain for r in points):
        return f"{family} (training did not help: untrained)"
    return f"{family} (hollow: training did not help)" if any(r.no_gain for r in points) else family


def _references(ax, x: Sequence[float], points: Sequence[Row], rows: Sequence[Row], metric: str, colour) -> None:
    """Beside a family's points: each point's own run's untrained model (dashed, the family's colour) and the
    number of training questions of each point (``n=...``)."""
    by_run = {(r.run_id, r.system): r for r in rows}
    untrained = [(xi, by_run.get((r.run_id, "untrained"))) for xi, r in zip(x, points, strict=True)]
    drawn = [(xi, 100 * u.overall[metric].mean) for xi, u in untrained if u is not None and metric in u.overall]
    if drawn:
        ux, uy = zip(*drawn, strict=True)
        ax.plot(ux, uy, linestyle="--", color=colour, alpha=0.8, label=f"{points[0].family} untrained (dashed)")
    for xi, r in zip(x, points, strict=True):
        y = 100 * r.overall[metric].mean
        if r.train_questions is not None:
            ax.annotate(f"n={r.train_questions}", (xi, y), textcoords="offset points", xytext=(0, 7), ha="center")
        if r.no_gain:  # hollow, over the family's filled marker
            ax.plot([xi], [y], linestyle="none", marker="o", markersize=11, mfc="white", mec=colour, zorder=3)


def _dense_reference(ax, x_of: dict[str, float], rows: Sequence[Row], metric: str) -> None:
    """The dense baseline of the runs drawn, at each point's x (grey, dotted)."""
    dense = sorted({(x_of[r.run_id], 100 * r.overall[metric].mean) for r in rows
                    if r.system == "dense" and r.run_id in x_of and metric in r.overall})  # fmt: skip
    if dense:
        ax.plot(*zip(*dense, strict=True), linestyle=":", color="grey", label="dense (dotted)")


def plot_scaling(
    rows: Sequence[Row], path: str | os.PathLike[str], metric: str = METRIC, test_set: str | None = None
) -> Path | None:
    """Recall against parameters (log scale) with 95% CIs, when some family has two or more sizes (GLM-RAG Fig. 6),
    else against trained parameters when those vary (a GLM with more or fewer frozen layers); each run's untrained
    model and dense retrieval beside it, points whose training did not help drawn hollow. ``rows`` of one test set
    (``test_set`` names it in the title): a line through two test sets' scores would zigzag between them."""
    sizes = {"parameters": lambda r: r.num_parameters, "trained parameters": lambda r: r.num_trainable_parameters}
    varying = [
        (xlabel, count, {f: [r for r in rs if count(r)] for f, rs in _by_family(rows).items()})
        for xlabel, count in sizes.items()
    ]
    varying = [v for v in varying if any(len({v[1](r) for r in rs}) > 1 for rs in v[2].values())]
    if not varying:
        return None
    xlabel, count, families = varying[0]
    title = "Model scaling (GLM-RAG Fig. 6)" if xlabel == "parameters" else "Trained capacity"
    title += f", on {test_set}" if test_set else ""
    fig, ax = _axes(title, xlabel, metric)
    for i, (family, rs) in enumerate(families.items()):
        rs = sorted(rs, key=count)
        x = [count(r) for r in rs]
        y = [100 * r.overall[metric].mean for r in rs]
        err = [[100 * (r.overall[metric].mean - r.overall[metric].low) for r in rs],
               [100 * (r.overall[metric].high - r.overall[metric].mean) for r in rs]]  # fmt: skip
        style = series_style(i)
        ax.errorbar(x, y, yerr=err, capsize=3, label=_family_label(family, rs), **style)
        _references(ax, x, rs, rows, metric, style["color"])
    _dense_reference(ax, {r.run_id: count(r) for rs in families.values() for r in rs}, rows, metric)
    ax.set_xscale("log")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_sweep(
    rows: Sequence[Row], key: str, path: str | os.PathLike[str], metric: str = METRIC, test_set: str | None = None
) -> Path | None:
    """Recall against the swept value ``key``: numbers on a numeric axis, other values in sorted order (a data-scaling
    study's fraction: the training questions, log scale); ``test_set`` names the rows' test set in the title."""
    families = _by_family(rows)
    swept = {f: [r for r in rs if r.values.get(key, MISSING) != MISSING] for f, rs in families.items()}
    if not any(swept.values()):
        return None
    values = sorted({r.values[key] for rs in swept.values() for r in rs}, key=_sort_key)
    numeric = all(_sort_key(v)[0] == 1 for v in values)
    position = {v: float(v) if numeric else i for i, v in enumerate(values)}
    by_questions = key == TRAIN_FRACTION and all(r.train_questions for rs in swept.values() for r in rs)
    xlabel = "training questions (log scale)" if by_questions else key

    def x_of(r: Row) -> float:  # data scaling (GLM-RAG Fig. 7): the questions trained on, not the fraction
        return float(r.train_questions) if by_questions else position[r.values[key]]

    title = f"{_label(metric)} by {xlabel.removesuffix(' (log scale)')}" + (f", on {test_set}" if test_set else "")
    fig, ax = _axes(title, xlabel, metric)
    for i, (family, rs) in enumerate(families.items()):
        style = series_style(i)
        points = sorted(swept[family], key=x_of)
        if points:
            x = [x_of(r) for r in points]
            ax.plot(x, [100 * r.overall[metric].mean for r in points], label=_family_label(family, points), **style)
            low, high = ([100 * getattr(r.overall[metric], e) for r in points] for e in ("low", "high"))
            ax.fill_between(x, low, high, alpha=0.15, color=style["color"])
            _references(ax, x, points, rows, metric, style["color"])
        elif len(rs) == 1:  # a reference without the swept value
            mean = 100 * rs[0].overall[metric].mean
            ax.axhline(mean, linestyle="--", color=style["color"], label=f"{family} (no {key}, dashed)")
    swept_x = {r.run_id: x_of(r) for points in swept.values() for r in points}
    _dense_reference(ax, swept_x, rows, metric)
    if by_questions:
        ax.set_xscale("log", base=2)
        ticks = sorted(set(swept_x.values()))
        ax.set_xticks(ticks, [f"{t:.0f}" for t in ticks])
    elif not numeric:
        ax.set_xticks(list(position.values()), [str(v) for v in values])
    ax.legend(fontsize=7)
    return _save(fig, path)


def repeated_groupings(runs: Sequence[StoredRun], groupings: Sequence[str] = FIGURE_GROUPINGS) -> dict[str, str]:
    """Grouping -> the earlier grouping it repeats: every run's breakdowns equal (same buckets, sizes, values)."""
    repeats: dict[str, str] = {}
    for j, grouping in enumerate(groupings):
        for earlier in groupings[:j]:
            if earlier not in repeats and all(
                grouping in r.metrics.get("breakdowns", {})
                and r.metrics["breakdowns"][grouping] == r.metrics["breakdowns"].get(earlier)
                for r in runs
            ):
                repeats[grouping] = earlier
                break
    return repeats


LABELS = {"hops": "hops", "n_supporting": "supporting passages", "density": "neighbourhood density"}


def plot_breakdown(
    runs: Sequence[StoredRun],
    grouping: str,
    path: str | os.PathLike[str],
    metric: str = METRIC,
) -> Path | None:
    """Recall by bucket of ``grouping`` (``hops``, ``n_supporting``, ``density``) for every run, with the
    buckets' ``ci`` as error bars where the breakdowns hold one. None when no run holds the grouping or it
    repeats an earlier one of :data:`FIGURE_GROUPINGS` (:func:`repeated_groupings`); the figure of that
    earlier one names both in its title."""
    runs = [r for r in runs if grouping in r.metrics.get("breakdowns", {})]
    repeats = repeated_groupings(runs)
    if not runs or grouping in repeats:
        return None
    same_as = [g for g, earlier in repeats.items() if earlier == grouping]
    name = " = ".join(LABELS.get(g, g) for g in (grouping, *same_as))
    fig, ax = _axes(f"{_label(metric)} by {name}", name, metric)
    buckets = sorted(
        {b for run in runs for by in run.metrics["breakdowns"][grouping].values() for b in by}, key=_sort_key
    )
    if grouping == "density":  # terciles, in order
        buckets = sorted(buckets, key=lambda b: ("low", "mid", "high").index(b) if b in ("low", "mid", "high") else 3)
    x = {b: i for i, b in enumerate(buckets)}

    first = runs[0].metrics
    baselines = [s for s in first["systems"] if s != first["reference"]]
    n_series = len(runs) + len(baselines)

    def line(i: int, by: dict, label: str, linestyle: str = "-") -> None:
        """One Line2D per series (broken by NaN before and after a small bucket), hollow markers over the small
        buckets, and the CIs as vertical bars (collections, so ``ax.lines`` holds the series only)."""
        style = series_style(i)
        shift = (i - (n_series - 1) / 2) * DODGE
        pts = sorted((x[b] + shift, 100 * v[metric], v) for b, v in by.items() if v.get(metric) is not None)
        xs: list[float] = []
        ys: list[float] = []
        for j, (xi, yi, v) in enumerate(pts):
            if j and min(v["n"], pts[j - 1][2]["n"]) < SMALL_N:
                xs.append(math.nan)
                ys.append(math.nan)
            xs.append(xi)
            ys.append(yi)
        ax.plot(xs, ys, linestyle=linestyle, label=label, **style)
        small = [(xi, yi) for xi, yi, v in pts if v["n"] < SMALL_N]
        if small:
            sx, sy = zip(*small, strict=True)
            ax.scatter(sx, sy, marker=style["marker"], facecolors="white", edgecolors=[style["color"]], zorder=3)
        bars = [(xi, 100 * ci[0], 100 * ci[1]) for xi, _, v in pts if (ci := v.get("ci", {}).get(metric))]
        if bars:
            bx, low, high = zip(*bars, strict=True)
            ax.vlines(bx, low, high, color=style["color"], linewidth=1.2, alpha=0.8)
            ax.scatter([*bx, *bx], [*low, *high], marker="_", color=style["color"], s=40)

    for i, run in enumerate(runs):
        by_system = run.metrics["breakdowns"][grouping]
        line(i, by_system.get(run.metrics["reference"], {}), run.run_id)
    for j, system in enumerate(baselines):
        line(len(runs) + j, first["breakdowns"][grouping].get(system, {}), f"{system} (dashed)", "--")
    n = {b: v.get("n") for b, v in first["breakdowns"][grouping].get(first["reference"], {}).items()}
    ax.set_xticks(list(x.values()), [f"{b}\n(n={n[b]})" if n.get(b) else str(b) for b in buckets])
    with_ci = any("ci" in v for run in runs for by in run.metrics["breakdowns"][grouping].values() for v in by.values())
    note = f"{'bars: 95% bootstrap CI; ' if with_ci else ''}hollow, unjoined: n < {SMALL_N}"
    ax.set_xlabel(f"{name}\n({note})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def breakdowns_with_ci(
    result: EvalResult, metric: str, groupings: Sequence[str] = FIGURE_GROUPINGS
) -> dict[str, dict[str, dict]]:
    """Grouping -> system -> bucket -> ``{n, metric, ci}`` from ``result``'s per-question rows (the questions
    where ``metric`` is defined), bootstrapped with the evaluation's own ``n_boot`` and ``seed``."""
    n_boot = result.settings.n_boot or 1000
    seed = result.settings.seed
    out: dict[str, dict[str, dict]] = {}
    for g in groupings:
        out[g] = {}
        for system, rows in result.per_question.items():
            rows = [r for r in rows if r.get(metric) is not None]
            out[g][system] = group_means(
                {metric: [r[metric] for r in rows]}, [row_bucket(r, g) for r in rows], n_boot, seed
            )
    return out


def evaluation_figures(result: EvalResult, folder: str | os.PathLike[str]) -> dict[str, Path]:
    """``recall_by_<grouping>.png`` in ``folder`` for each of :data:`FIGURE_GROUPINGS` that ``result`` holds
    and that does not repeat an earlier one: the reference system's line and every other system's dashed,
    with 95% CIs; returns the written paths by file name."""
    recalls = [m for m in result.metric_names if m.startswith("recall@")]
    metric = METRIC if METRIC in recalls else next(iter(recalls), None)
    if metric is None:
        return {}
    groupings = [g for g in FIGURE_GROUPINGS if g in result.breakdowns]
    metrics = metrics_json(result) | {"breakdowns": breakdowns_with_ci(result, metric, groupings)}
    run = StoredRun(run_id=str(result.reference or result.systems[0]), path=Path(folder), metrics=metrics)
    figures = {
        f"recall_by_{g}.png": plot_breakdown([run], g, Path(folder) / f"recall_by_{g}.png", metric) for g in groupings
    }
    return {name: path for name, path in figures.items() if path is not None}
