"""Embedding throughput through a local OpenAI-compatible server against the same model in-process (issue 51).

The server is :class:`glmrag.llm.serve.LLMServer` on 127.0.0.1 in this process, in front of the offline
all-MiniLM-L6-v2 (``Embedder``); the client is ``Embedder("http:<model>@<url>")``
(:mod:`glmrag.index.served_embed`: requests of 32 texts, 4 in flight, an empty disk cache each repeat). Texts: the
passages (``title\\ntext``) of the embedded MuSiQue-100 set, the first ``--texts`` of them. For each side, a warm-up
on 64 other texts, then ``--repeats`` runs: wall seconds and texts per second; the ratio is served / in-process
throughput, and the largest absolute difference between the two sides' vectors is reported beside it.

The server computes one request at a time (its lock), as a one-GPU text-embeddings-inference or vLLM process
batches on its side; what this measures is the cost of the protocol (JSON of 384 floats a text, requests of 32
instead of batches of 256), not a server's speed.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_served_embed.py`` (about a minute on 2 cores). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

import glmrag
from glmrag.index.embed import Embedder, passage_text
from glmrag.llm.serve import LLMServer


def timed(embedder: Embedder, texts: list[str], repeats: int, fresh_cache) -> tuple[list[float], np.ndarray]:
    embedder.encode([f"warm-up {i}" for i in range(64)])
    seconds = []
    for _ in range(repeats):
        fresh_cache()
        start = time.perf_counter()
        vectors = embedder.encode(texts)
        seconds.append(time.perf_counter() - start)
    return seconds, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = glmrag.load_data("musique100")
    texts = [passage_text(p) for p in data.corpus][: args.texts]
    local = Embedder()
    with tempfile.TemporaryDirectory() as root, LLMServer(None, model_name="minilm", embedder=local) as server:
        runs = iter(range(10**6))

        def fresh_cache() -> None:  # a new cache root: every vector is asked for again
            os.environ["GLMRAG_CACHE_DIR"] = f"{root}/{next(runs)}"

        in_process, expected = timed(local, texts, args.repeats, lambda: None)
        served, got = timed(Embedder(f"http:minilm@{server.base_url}"), texts, args.repeats, fresh_cache)
    rate = {name: len(texts) / statistics.median(s) for name, s in (("in_process", in_process), ("served", served))}
    print(
        json.dumps(
            {
                "texts": len(texts),
                "repeats": args.repeats,
                "in_process_s": [round(s, 2) for s in in_process],
                "served_s": [round(s, 2) for s in served],
                "in_process_texts_per_s": round(rate["in_process"], 1),
                "served_texts_per_s": round(rate["served"], 1),
                "served_over_in_process": round(rate["served"] / rate["in_process"], 3),
                "max_abs_difference": float(np.abs(got - expected).max()),
                "requests": server.requests,
            }
        )
    )


if __name__ == "__main__":
    main()
