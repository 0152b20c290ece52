"""Index build, subgraph selection and PPR on the real 2Wiki test corpus (CPU).

Targets (issue 2): spaCy index of the 6,119-passage corpus in under 3 minutes
on 2 cores; subgraph selection (2 hops, 600 triplets; GLM-RAG App. C) under
5 ms median per question; PPR retrieval under 20 ms per question.

    python benchmarks/bench_2wiki_index.py --out benchmarks/results/bench_2wiki_index.json

Needs the shared data (``$GLMRAG_DATA_DIR`` or ``../shared/data``). The index is
always rebuilt here (into a temporary folder) so the build time is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from glmrag.data.registry import load_dataset
from glmrag.graph.subgraph import select_subgraph
from glmrag.index.build import IndexSettings, build_index
from glmrag.index.embed import Embedder
from glmrag.index.extractors.spacy_extractor import SpacyExtractor
from glmrag.index.store import load_index, save_index
from glmrag.retrievers.ppr import PPRRetriever


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2, help="spaCy worker processes")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()

    dataset = load_dataset("2wiki_test")
    embedder = Embedder()
    embedder.encode(["warm-up"])  # model load is not part of the build

    start = time.perf_counter()
    index = build_index(dataset.corpus, dataset.qa, SpacyExtractor(n_process=args.processes), embedder, IndexSettings())
    build_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        save_index(index, Path(tmp) / "index")
        save_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = load_index(Path(tmp) / "index")
        load_s = time.perf_counter() - t0

    seeds = [index.seeds(q.id) for q in dataset.qa]
    select_subgraph(index, seeds[0])  # builds the cached CSR adjacency
    per_question = []
    truncated = 0
    for s in seeds:
        t0 = time.perf_counter()
        sub = select_subgraph(index, s, max_hops=2, max_triplets=600, seed=0)
        per_question.append(time.perf_counter() - t0)
        truncated += sub.truncated
    sub_ms = 1000 * np.asarray(per_question)

    ppr = PPRRetriever()
    ppr.prepare(index)
    t0 = time.perf_counter()
    ppr.retrieve(list(dataset.qa), index, dataset.corpus, top_k=10)
    ppr_ms = 1000 * (time.perf_counter() - t0) / len(dataset.qa)

    figures = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "passages": len(dataset.corpus),
        "questions": len(dataset.qa),
        "counts": index.manifest["counts"],
        "build_timings_s": index.manifest.get("timings_s"),
        "index_build_s": round(build_s, 1),
        "index_save_s": round(save_s, 2),
        "index_load_s": round(load_s, 2),
        "subgraph_ms": {
            "median": round(float(np.median(sub_ms)), 3),
            "p90": round(float(np.percentile(sub_ms, 90)), 3),
            "max": round(float(sub_ms.max()), 3),
            "truncated_by_budget": int(truncated),
        },
        "ppr_ms_per_question": round(ppr_ms, 2),
        "ppr_questions_without_seeds": ppr.fallbacks,
    }
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
