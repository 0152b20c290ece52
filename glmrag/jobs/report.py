"""Build the report of a study from its results folder: paper-style tables (Markdown, CSV) and PNG figures.

    python -m glmrag.jobs.report results/subgraph_restriction [--out DIR] [--wandb]
    glmrag report results/subgraph_restriction                         (the installed entry point)

Reads every run that ``train.py`` / ``eval.py`` filed under the folder (:mod:`glmrag.eval.store`) and
writes into ``--out`` (default ``<results dir>/report``): ``report.md`` (tables, each family's gain per doubling
of training questions where it was trained on several numbers of them (:mod:`glmrag.eval.study_slopes`), and the
figures),
``paper_table.csv``, ``runs.csv``, ``scaling.png`` (when a family has several sizes or trained sizes),
``recall_by_<swept value>.png`` (a one-dimensional sweep); both ``..._on_<test set>.png``, one per test set, when the
runs were tested on several; each of these for Recall@2 and again for Recall@5 (``..._at5.png``),
``recall_by_hops.png`` and
``recall_by_n_supporting.png`` (only where it differs from hops; on MuSiQue the two are the same grouping).

With ``--wandb`` the figures (``wandb.Image``) and the CSV tables (``wandb.Table``) are also logged to a
new run of job type ``report`` in the wandb project ``glmrag`` (:func:`log_to_wandb`): online when you
are logged in, else offline under ``<out>/wandb`` (``wandb sync`` uploads it later); ``WANDB_MODE`` and
``WANDB_DIR`` override both. Without ``--wandb`` nothing imports wandb.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from glmrag.eval.store import read_runs
from glmrag.eval.study_plots import FIGURE_GROUPINGS, plot_breakdown, plot_scaling, plot_sweep
from glmrag.eval.study_slopes import format_slopes_markdown
from glmrag.eval.study_tables import METRICS, format_study_markdown, paper_csv, runs_csv, study_rows
from glmrag.io import atomic_write_text

WANDB_PROJECT = "glmrag"
"""The project of the training runs (configs/logger/wandb.yaml), so a study's report sits next to its runs."""


def build_report(results_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Write the report of every run under ``results_dir`` into ``out``; returns the written paths by name."""
    results_dir = Path(results_dir)
    out = Path(out) if out is not None else results_dir / "report"
    runs = read_runs(results_dir)
    if not any(r.evaluated for r in runs):
        raise ValueError(f"{results_dir} holds no evaluated run ({len(runs)} runs without evaluator metrics)")
    rows, keys = study_rows(runs)
    figures = {}
    swept = [k for k in keys if k != "eval_data"]
    tests = sorted({r.eval_data for r in rows}) if "eval_data" in keys else [None]
    for metric in METRICS:  # Recall@2 as scaling.png / recall_by_<key>.png, Recall@5 with the suffix _at5
        suffix = "" if metric == METRICS[0] else f"_at{metric.rsplit('@', 1)[1]}"
        for eval_data in tests:  # one figure per test set when the runs were tested on several
            on = "" if eval_data is None else f"_on_{_slug(eval_data)}"
            subset = rows if eval_data is None else [r for r in rows if r.eval_data == eval_data]
            name = f"scaling{on}{suffix}.png"
            figures[name] = plot_scaling(subset, out / name, metric, test_set=eval_data)
            if len(swept) == 1:
                name = f"recall_by_{_slug(swept[0])}{on}{suffix}.png"
                figures[name] = plot_sweep(subset, swept[0], out / name, metric, test_set=eval_data)
    for grouping in FIGURE_GROUPINGS:
        figures[f"recall_by_{grouping}.png"] = plot_breakdown(runs, grouping, out / f"recall_by_{grouping}.png")
    drawn = {name: path for name, path in figures.items() if path is not None}

    markdown = format_study_markdown(runs, f"Study {results_dir.name}")
    if slopes := format_slopes_markdown(runs, METRICS):
        markdown += "\n" + slopes
    markdown += "".join(f"\n![{name}]({name})\n" for name in drawn)
    paths = {
        "report.md": atomic_write_text(out / "report.md", markdown),
        "paper_table.csv": atomic_write_text(out / "paper_table.csv", paper_csv(runs)),
        "runs.csv": atomic_write_text(out / "runs.csv", runs_csv(runs)),
    }
    return paths | drawn


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text)


def _cell(text: str) -> Any:
    """A CSV cell as wandb should see it: empty -> None, numbers -> int/float, True/False -> bool."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def log_to_wandb(paths: Mapping[str, Path], results_dir: str | os.PathLike[str], project: str = WANDB_PROJECT) -> str:
    """Log a report (the paths :func:`build_report` returns) to a new wandb run; returns the run's folder.

    Every PNG becomes a ``wandb.Image`` and every CSV a ``wandb.Table`` under its file name without the
    extension (``scaling``, ``paper_table``, ``runs``, ...), in one step of a run named
    ``report-<study>`` with job type ``report``. The mode follows ``WANDB_MODE`` when set, else
    :func:`glmrag.jobs.loggers.resolve_wandb_mode` (online when logged in, offline otherwise); the run is
    written under ``WANDB_DIR`` when set, else next to the report.
    """
    try:
        import wandb
    except ImportError as err:
        raise ImportError("--wandb needs the wandb package: pip install wandb, or drop --wandb") from err
    from glmrag.jobs.loggers import resolve_wandb_mode  # imports Lightning: only when logging to wandb

    results_dir = Path(results_dir)
    out = Path(next(iter(paths.values()))).parent
    mode = None if os.environ.get("WANDB_MODE") else resolve_wandb_mode("auto")
    media: dict[str, Any] = {}
    for name, path in paths.items():
        stem, suffix = Path(name).stem, Path(name).suffix
        if suffix == ".png":
            media[stem] = wandb.Image(str(path), caption=name)
        elif suffix == ".csv":
            with Path(path).open(newline="") as f:
                header, *rows = list(csv.reader(f))
            media[stem] = wandb.Table(
                columns=header, data=[[_cell(v) for v in row] for row in rows], allow_mixed_types=True
            )
    out.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=project,
        name=f"report-{results_dir.name}",
        job_type="report",
        config={"results_dir": str(results_dir), "report_dir": str(out)},
        dir=None if os.environ.get("WANDB_DIR") else str(out),
        mode=mode,
        reinit="create_new",
    )
    try:
        run.log(media)
        folder = str(Path(run.dir).parent)
    finally:
        run.finish()
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m glmrag.jobs.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", help="a results folder, e.g. results/<study>")
    parser.add_argument("--out", default=None, help="output folder (default: <results_dir>/report)")
    parser.add_argument(
        "--wandb", action="store_true", help=f"also log the figures and tables to a wandb run (project {WANDB_PROJECT})"
    )
    args = parser.parse_args(argv)
    paths = build_report(args.results_dir, args.out)
    for path in paths.values():
        print(path)
    if args.wandb:
        print(f"wandb run: {log_to_wandb(paths, args.results_dir)}")
    return 0


def cli(argv: Sequence[str] | None = None) -> int:
    """The ``glmrag`` entry point: ``glmrag report <results dir> [--out DIR] [--wandb]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "report":
        print("usage: glmrag report <results dir> [--out DIR] [--wandb]", file=sys.stderr)
        return 2
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
