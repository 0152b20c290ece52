"""How per-question graph costs grow with the KG (issue 16 item 4, reduced version).

Power-law KGs (``glmrag.index.synthetic.power_law_index``: Zipf-like degrees, exponent 0.9) of
``--triples`` triples with one entity per 4.3 triples (the 2Wiki test index's ratio: 59,281 entities,
256,022 triples), 20 random questions of 1-4 seeds each. Per size, CPU seconds (``time.process_time``;
the machine is shared) of: building the CSR adjacency and the PPR random walk (once per KG), subgraph
selection (2 hops, 600 triplets; GLM-RAG App. C), batched PPR and the evaluator's 10-hop seed search, per
question. The growth exponent of each is the slope of log(cost) on log(triples).

Reduced: no GNN forward, synonym search (see ``benchmarks/RESULTS.md``: quadratic), real-corpus builds or
10^7 triples here.

    python benchmarks/bench_scaling.py --triples 10000 100000 1000000 --out benchmarks/results/bench_scaling.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from glmrag.graph.subgraph import select_subgraph
from glmrag.graph.traverse import hop_distances
from glmrag.index.synthetic import power_law_index, random_questions
from glmrag.io import atomic_write_text
from glmrag.retrievers.ppr import PPRRetriever

TRIPLES_PER_ENTITY = 256_022 / 59_281
STAGES = ("build_graph_s", "subgraph_ms", "ppr_ms", "seed_search_ms")


def cpu(fn):
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def measure(triples: int, n_questions: int) -> dict:
    index = power_law_index(int(triples / TRIPLES_PER_ENTITY), triples, num_relations=1000, num_passages=6119)
    questions = random_questions(index, n_questions)
    ppr = PPRRetriever()
    build_s, _ = cpu(lambda: (index.adjacency, ppr.prepare(index)))
    seeds = [index.seeds(q.id) for q in questions]
    sub_s, _ = cpu(lambda: [select_subgraph(index, s, max_hops=2, max_triplets=600, seed=0) for s in seeds])
    ppr_s, _ = cpu(lambda: ppr.entity_scores(questions, index))
    search_s, _ = cpu(lambda: [hop_distances(index, s, cutoff=10) for s in seeds])
    per_q = 1000 / n_questions
    return {
        "triples": triples,
        "entities": index.num_entities,
        "build_graph_s": round(build_s, 3),
        "subgraph_ms": round(sub_s * per_q, 3),
        "ppr_ms": round(ppr_s * per_q, 3),
        "seed_search_ms": round(search_s * per_q, 3),
    }


def exponents(rows: list[dict]) -> dict[str, float]:
    x = np.log([r["triples"] for r in rows])
    return {s: round(float(np.polyfit(x, np.log([max(r[s], 1e-6) for r in rows]), 1)[0]), 2) for s in STAGES}


def plot(rows: list[dict], slopes: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s in STAGES:
        ax.loglog([r["triples"] for r in rows], [r[s] for r in rows], marker="o", label=f"{s} (slope {slopes[s]})")
    ax.set_xlabel("triples")
    ax.set_ylabel("CPU cost (s for build, ms per question otherwise)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triples", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_scaling.json"))
    args = parser.parse_args()
    rows = []
    for triples in args.triples:
        rows.append(measure(triples, args.questions))
        print(json.dumps(rows[-1]), flush=True)
    slopes = exponents(rows)
    result = {"rows": rows, "growth_exponents": slopes, "questions_per_size": args.questions}
    print(text := json.dumps(result, indent=2))
    atomic_write_text(args.out, text + "\n")
    plot(rows, slopes, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
