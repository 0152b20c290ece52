"""How dense path-mode positions are: the share of node pairs and token pairs a path joins (issue 16 item 1).

Triple mode positions only the token pairs inside one triple (about 0.3% of a 600-triplet 2Wiki graph's
pairs); path mode positions every pair joined by a directed path either way. This prints, per graph of the
first questions of 2wiki_test at 600 triplets, the nodes, graph tokens and both shares, so the cost of path
mode can be read against the size of its output.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/path_density.py --index-folder <2wiki_test index folder>
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_path_positions import layouts_of

from glmrag.datamodules.glm_inputs import load_tokenizer
from glmrag.graph import positions
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.store import load_index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index-folder", required=True, help="a built 2wiki_test index folder")
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--triplets", type=int, default=600)
    args = parser.parse_args()
    layouts = layouts_of(
        "2wiki_test", load_index(args.index_folder), args.triplets, args.questions, load_tokenizer(DEFAULT_MODEL)
    )
    print("| nodes | graph tokens | node pairs joined | token pairs positioned (path) | (triple) |")
    print("|---:|---:|---:|---:|---:|")
    for layout in layouts:
        n_graph = layout.num_graph_tokens
        _, path_kind = positions.graph_positions(layout, "path")
        _, triple_kind = positions.graph_positions(layout, "triple")
        lengths = np.bincount(layout.node_of_token[:n_graph], minlength=layout.num_nodes)
        dist, _, _ = positions._node_distances(layout.triple_nodes, lengths)
        joined = (dist >= 0) | (dist.T >= 0)  # in table order; the share does not depend on it
        share = [np.mean(k[:n_graph, :n_graph] == positions.SAME_TRIPLE) for k in (path_kind, triple_kind)]
        print(f"| {layout.num_nodes} | {n_graph} | {joined.mean():.1%} | {share[0]:.1%} | {share[1]:.2%} |")


if __name__ == "__main__":
    main()
