"""The PPR prior per question: walked the first time a (KG, seed row) is seen, read back after (issue 35, item 4).

:class:`glmrag.nn.prior.EntityPrior` keeps each question's ``log p(e | q)`` row (:class:`~glmrag.nn.prior.PriorRows`),
so a training epoch after the first, and every evaluation after a validation, reads the prior instead of running
its ~21 sparse power iterations. On the synthetic KG of GLM-RAG Table 11's 2Wiki-test size (``bench_gnn_cpu``'s),
for ``--questions`` questions one at a time: the median CPU time of a forward of the prior the first time (walked)
and the second time (read), and the rows the cache holds.

Run: ``PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_prior_cache.py`` (about a minute). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gnn_cpu import EMBED_DIM, ENTITIES, PASSAGES, RELATIONS, TRIPLES, random_graph_inputs  # noqa: E402

from glmrag.index.synthetic import power_law_index, random_questions  # noqa: E402
from glmrag.nn.graph_inputs import seed_weights  # noqa: E402
from glmrag.nn.prior import EntityPrior, PriorSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    index = power_law_index(ENTITIES, TRIPLES, RELATIONS, PASSAGES)
    graph = random_graph_inputs(index, EMBED_DIM)
    seeds = seed_weights(index, [q.id for q in random_questions(index, args.questions)])  # (Q, E)
    prior = EntityPrior(PriorSettings())
    prior.walk(graph)  # the walk is built once per graph, outside the timing

    def timed() -> list[float]:
        times = []
        for row in range(args.questions):
            start = time.process_time()
            with torch.no_grad():
                prior(graph, seeds[row : row + 1])
            times.append(time.process_time() - start)
        return times

    walked, read = timed(), timed()
    assert prior.cache.computed == args.questions  # the second pass walked nothing
    print(
        json.dumps(
            {
                "entities": index.num_entities,
                "questions": args.questions,
                "walked_ms": round(1000 * statistics.median(walked), 2),
                "read_ms": round(1000 * statistics.median(read), 3),
                "cached_rows": len(prior.cache.rows),
                "cached_mib": round(prior.cache.nbytes / 2**20, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
