"""Path-mode graph positions before and after, on real subgraphs, in one process (issue 16 item 1).

For the first ``--questions`` questions of each dataset, the subgraph of ``--triplets`` triplets is selected
and laid out once (as ``benchmarks/bench_glm_inputs.py --breakdown`` does; not timed). Then, question by
question and ``--repeats`` times, the same layout is expanded by ``graph_positions`` of this checkout in
``path`` mode, by the ``glmrag/graph/positions.py`` of git revision ``--before`` in ``path`` mode, and by
this checkout in ``triple`` mode (the default ``last`` rule), interleaved so that the machine's load falls
on all three alike. Every before/after pair is checked equal (positions and kinds). Times are CPU
milliseconds per question of this process (``time.process_time``, one thread: run with
``OMP_NUM_THREADS=1``), and the node-distance part of the new path mode is timed on its own.

    OMP_NUM_THREADS=1 python benchmarks/bench_path_positions.py --datasets 2wiki_test musique100 \\
        --triplets 600 --questions 50

An index is found as ``bench_glm_inputs.py`` finds it (``--index-cache``; built there when missing), or read
from a folder given by ``--index-folder NAME=PATH`` (checksums verified, build settings not compared: for
an index built before a setting was added to the cache key).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
import types
from pathlib import Path

import numpy as np
from bench_glm_inputs import index_of

from glmrag.data.registry import load_dataset
from glmrag.datamodules.glm_inputs import SubgraphSettings, load_tokenizer
from glmrag.graph import path_positions, positions
from glmrag.graph.levi import layout_subgraph
from glmrag.graph.subgraph import select_subgraph
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.store import load_index


def module_at(revision: str) -> types.ModuleType:
    """``glmrag/graph/positions.py`` as it was at git ``revision``, as a module."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "-C", str(root), "show", f"{revision}:glmrag/graph/positions.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType(f"positions_at_{revision}")
    exec(compile(source, f"{revision}:glmrag/graph/positions.py", "exec"), module.__dict__)
    return module


def layouts_of(name: str, index, budget: int, n_question: int, tokenizer) -> list:
    dataset = load_dataset(name)
    settings = SubgraphSettings(max_triplets=budget)
    layouts = []
    for q in list(dataset.qa)[:n_question]:
        sub = select_subgraph(index, index.seeds(q.id), settings.max_hops, budget, seed=settings.bfs_seed(q.id))
        layouts.append(layout_subgraph(index, sub, tokenizer, q.question, settings.question_eos))
    return layouts


def timed(function, *args) -> float:
    start = time.process_time()
    function(*args)
    return time.process_time() - start


def compare(layouts: list, before: types.ModuleType, repeats: int) -> dict[str, float]:
    """Mean CPU ms per question of each variant (module docstring)."""
    spent = dict.fromkeys(("path_before", "path_after", "triple", "path_after_distances"), 0.0)
    for layout in layouts:
        old, new = before.graph_positions(layout, "path"), positions.graph_positions(layout, "path")
        if not (np.array_equal(old[0], new[0]) and np.array_equal(old[1], new[1])):
            raise AssertionError("path positions differ from the --before revision's")
    for _ in range(repeats):
        for layout in layouts:
            n_graph = layout.num_graph_tokens
            lengths = np.bincount(layout.node_of_token[:n_graph], minlength=layout.num_nodes)
            spent["path_after"] += timed(positions.graph_positions, layout, "path")
            spent["path_before"] += timed(before.graph_positions, layout, "path")
            spent["triple"] += timed(positions.graph_positions, layout, "triple")
            spent["path_after_distances"] += timed(positions._node_distances, layout.triple_nodes, lengths)
    n = repeats * len(layouts)
    return {key: round(seconds / n * 1e3, 1) for key, seconds in spent.items()}


def by_block(layouts: list, args) -> dict[int, float]:
    """Mean CPU ms per question of path mode at each ``--row-blocks`` size, interleaved."""
    default, spent = path_positions.ROW_BLOCK, dict.fromkeys(args.row_blocks, 0.0)
    try:
        for _ in range(args.repeats):
            for layout in layouts:
                for block in args.row_blocks:
                    path_positions.ROW_BLOCK = block
                    spent[block] += timed(positions.graph_positions, layout, "path")
    finally:
        path_positions.ROW_BLOCK = default
    return {block: round(seconds / (args.repeats * len(layouts)) * 1e3, 1) for block, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["2wiki_test", "musique100"])
    parser.add_argument("--triplets", nargs="+", type=int, default=[600])
    parser.add_argument("--questions", type=int, default=50, help="first N questions of each dataset")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default="dc2f211", help="git revision of the positions module to compare with")
    parser.add_argument("--index-cache", default=os.path.expanduser("~/.cache/glmrag/indexes"))
    parser.add_argument("--index-folder", nargs="*", default=[], metavar="NAME=PATH")
    parser.add_argument("--row-blocks", nargs="*", type=int, default=[], help="also time path mode at these ROW_BLOCKs")
    args = parser.parse_args()

    folders = dict(item.split("=", 1) for item in args.index_folder)
    before, tokenizer = module_at(args.before), load_tokenizer(DEFAULT_MODEL)
    for name in args.datasets:
        index = load_index(folders[name]) if name in folders else index_of(name, args.index_cache)[1]
        for budget in args.triplets:
            layouts = layouts_of(name, index, budget, args.questions, tokenizer)
            times = compare(layouts, before, args.repeats)
            tokens = float(np.mean([layout.num_graph_tokens for layout in layouts]))
            ratio = {
                "after_over_triple": round(times["path_after"] / times["triple"], 2),
                "before_over_after": round(times["path_before"] / times["path_after"], 2),
            }
            row = {"dataset": name, "triplets": budget, "graph_tokens_mean": round(tokens, 1), **times, **ratio}
            print(json.dumps(row), flush=True)
            if args.row_blocks:
                blocks = by_block(layouts, args)
                print(json.dumps({"dataset": name, "triplets": budget, "row_block_ms": blocks}), flush=True)


if __name__ == "__main__":
    main()
