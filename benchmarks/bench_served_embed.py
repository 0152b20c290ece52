"""Embedding throughput through a local OpenAI-compatible server against the same model in-process (issue 51).

The server is :class:`glmrag.llm.serve.LLMServer` on 127.0.0.1 in this process, in front of the offline
all-MiniLM-L6-v2 (``Embedder``); the client is ``Embedder("http:<model>@<url>")``
(:mod:`glmrag.index.served_embed`: requests of 32 texts, 4 in flight, an empty disk cache each repeat). Texts: the
passages (``title\\ntext``) of the embedded MuSiQue-100 set, the first ``--texts`` of them. For each side, a warm-up
on 64 other texts, then ``--repeats`` runs: wall seconds and texts per second; the ratios are served / in-process
throughput, against the in-process default (batches of 256) and against in-process batches of 32, the batches the
server computes (so that ratio is the protocol's cost alone), and the largest absolute difference between the
served and the in-process vectors is reported beside them. The sides alternate within each repeat.

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
from glmrag.index.served_embed import REQUEST_TEXTS
from glmrag.llm.serve import LLMServer


def timed(sides: dict[str, Embedder], texts: list[str], repeats: int, fresh_cache) -> dict[str, list[float]]:
    """Wall seconds of each side's ``encode(texts)``, the sides interleaved within each repeat so that a change of
    the machine's load falls on all of them; a new cache root before each (a served model asks for every vector)."""
    for embedder in sides.values():
        embedder.encode([f"warm-up {i}" for i in range(64)])
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, embedder in sides.items():
            fresh_cache()
            start = time.perf_counter()
            embedder.encode(texts)
            seconds[name].append(time.perf_counter() - start)
    return seconds


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

        sides = {
            "in_process": local,
            "in_process_batch_32": Embedder(batch_size=REQUEST_TEXTS),
            "served": Embedder(f"http:minilm@{server.base_url}"),
        }
        runs = timed(sides, texts, args.repeats, fresh_cache)
        difference = float(np.abs(sides["served"].encode(texts) - local.encode(texts)).max())  # served ones cached
    rate = {name: len(texts) / statistics.median(s) for name, s in runs.items()}
    print(
        json.dumps(
            {
                "texts": len(texts),
                "repeats": args.repeats,
                **{f"{name}_s": [round(s, 2) for s in seconds] for name, seconds in runs.items()},
                **{f"{name}_texts_per_s": round(r, 1) for name, r in rate.items()},
                "served_over_in_process": round(rate["served"] / rate["in_process"], 3),
                "served_over_in_process_batch_32": round(rate["served"] / rate["in_process_batch_32"], 3),
                "max_abs_difference": difference,
                "requests": server.requests,
            }
        )
    )


if __name__ == "__main__":
    main()
