"""Timing of subgraph selection and batched PPR on a synthetic KG of 2Wiki-test size.

GLM-RAG Table 11: the 2Wiki test KG has 48,779 entities, 20,748 relations,
160,950 triples and 6,119 documents. The synthetic graph draws triple endpoints
from a Zipf-like entity popularity so that it has hubs, like an OpenIE KG.

Run: ``python benchmarks/bench_graph_synthetic.py`` (about a minute on one core).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from glmrag.graph.subgraph import select_subgraph
from glmrag.index.synthetic import power_law_index, random_questions
from glmrag.retrievers.ppr import PPRRetriever

# GLM-RAG Table 11, 2Wiki (test)
ENTITIES, RELATIONS, TRIPLES, PASSAGES = 48_779, 20_748, 160_950, 6_119


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    args = parser.parse_args()

    t0 = time.perf_counter()
    index = power_law_index(ENTITIES, TRIPLES, RELATIONS, PASSAGES)
    _ = index.adjacency
    degree = index.adjacency.degree()
    print(
        f"graph: {index.num_entities} entities, {len(index.triples)} triples, "
        f"max degree {degree.max()}, median {np.median(degree):.0f} ({time.perf_counter() - t0:.1f} s to build)"
    )
    questions = random_questions(index, args.questions)

    times, sizes, truncated = [], [], 0
    for q in questions:
        t = time.perf_counter()
        sub = select_subgraph(index, index.seeds(q.id), max_hops=2, max_triplets=600, seed=0)
        times.append(time.perf_counter() - t)
        sizes.append(len(sub))
        truncated += sub.truncated
    ms = 1000 * np.asarray(times)
    print(
        f"select_subgraph (2 hops, 600 triplets): median {np.median(ms):.2f} ms, p90 {np.percentile(ms, 90):.2f} ms, "
        f"max {ms.max():.2f} ms; mean size {np.mean(sizes):.0f}; truncated {truncated}/{len(questions)}"
    )

    ppr = PPRRetriever()
    t = time.perf_counter()
    ppr.prepare(index)
    prep = time.perf_counter() - t
    t = time.perf_counter()
    rankings = ppr.retrieve(questions, index, corpus=None, top_k=10)
    elapsed = time.perf_counter() - t
    print(
        f"PPR: prepare {prep * 1000:.0f} ms; {1000 * elapsed / len(questions):.2f} ms per question "
        f"({len(rankings)} questions, batch {ppr.batch_size})"
    )


if __name__ == "__main__":
    main()
