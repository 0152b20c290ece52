"""Build the report of a study from its results folder: paper-style tables (Markdown, CSV) and PNG figures.

    python -m glmrag.report results/subgraph_restriction [--out DIR]
    glmrag report results/subgraph_restriction                         (the installed entry point)

Reads every run that ``train.py`` / ``eval.py`` filed under the folder (:mod:`glmrag.eval.store`) and
writes into ``--out`` (default ``<results dir>/report``): ``report.md`` (tables and the figures),
``paper_table.csv``, ``runs.csv``, ``scaling.png`` (when a family has several sizes),
``recall_by_<swept value>.png`` (a one-dimensional sweep), ``recall_by_hops.png`` and
``recall_by_n_supporting.png``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from glmrag.eval.store import read_runs
from glmrag.eval.study_plots import plot_breakdown, plot_scaling, plot_sweep
from glmrag.eval.study_report import format_study_markdown, paper_csv, runs_csv, study_rows
from glmrag.io import atomic_write_text


def build_report(results_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Write the report of every run under ``results_dir`` into ``out``; returns the written paths by name."""
    results_dir = Path(results_dir)
    out = Path(out) if out is not None else results_dir / "report"
    runs = read_runs(results_dir)
    if not any(r.evaluated for r in runs):
        raise ValueError(f"{results_dir} holds no evaluated run ({len(runs)} runs without evaluator metrics)")
    rows, keys = study_rows(runs)
    figures = {"scaling.png": plot_scaling(rows, out / "scaling.png")}
    if len(keys) == 1:
        name = f"recall_by_{re.sub(r'[^A-Za-z0-9]+', '_', keys[0])}.png"
        figures[name] = plot_sweep(rows, keys[0], out / name)
    for grouping in ("hops", "n_supporting"):
        figures[f"recall_by_{grouping}.png"] = plot_breakdown(runs, grouping, out / f"recall_by_{grouping}.png")
    drawn = {name: path for name, path in figures.items() if path is not None}

    markdown = format_study_markdown(runs, f"Study {results_dir.name}")
    markdown += "".join(f"\n![{name}]({name})\n" for name in drawn)
    paths = {
        "report.md": atomic_write_text(out / "report.md", markdown),
        "paper_table.csv": atomic_write_text(out / "paper_table.csv", paper_csv(runs)),
        "runs.csv": atomic_write_text(out / "runs.csv", runs_csv(runs)),
    }
    return paths | drawn


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m glmrag.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", help="a results folder, e.g. results/<study>")
    parser.add_argument("--out", default=None, help="output folder (default: <results_dir>/report)")
    args = parser.parse_args(argv)
    for path in build_report(args.results_dir, args.out).values():
        print(path)
    return 0


def cli(argv: Sequence[str] | None = None) -> int:
    """The ``glmrag`` entry point: ``glmrag report <results dir> [--out DIR]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "report":
        print("usage: glmrag report <results dir> [--out DIR]", file=sys.stderr)
        return 2
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
