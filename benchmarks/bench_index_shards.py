"""Index build time and peak memory against corpus size and against shards (issue 36 item 4).

A synthetic corpus stands in for a real one, so the figures measure the build, not a model:

- passages: ``--entities-per-passage`` (6) entity mentions drawn from a vocabulary of ``3 x passages``
  pseudo-word names (no digits, so every entity shares one synonym group) with Zipf-like popularity
  (``rank ** -0.9``, as :func:`glmrag.index.synthetic.power_law_index`), 5% of them a plural variant ("... s"),
  and ``--triples-per-passage`` (4) triples between them over 50 relations, written into the passage text;
- the extractor (:class:`TextTriples`) parses that text back: the fast stand-in for spaCy or LLM OpenIE;
- the embedder (:class:`HashEmbedder`, 64-d) maps a phrase to a unit vector from its BLAKE2 digest, a plural
  variant close to its singular (cosine about 0.95), so the synonym search has real pairs to find;
- 100 questions name two entities each, linked through spaCy's mentions and the hash vectors.

Each measurement is a child process (its peak RSS is its own): ``build`` runs
:func:`glmrag.index.build.build_index` (one machine); ``shard`` runs :func:`glmrag.index.shards.build_shard` for
one shard; ``merge`` runs :func:`glmrag.index.shards.merge_shards`. The shards of one run are started one after
another (the machine has 2 shared cores: concurrent shards would measure the contention, not a node), so the wall
time of ``n`` nodes is estimated as the slowest shard plus the merge. Each child makes the whole synthetic corpus
(as the job loads the whole dataset) and records its RSS before that (``rss_start_mb``: the imports). Growth
exponent = least-squares slope of log(seconds), or of log(peak MiB above the start), against log(passages). A
child that runs past ``--timeout`` seconds is killed and recorded as such.

    OMP_NUM_THREADS=1 python benchmarks/bench_index_shards.py --sizes 10000 30000 100000 300000 1000000 \\
        --shards 1 2 4 --shard-size 100000 --out benchmarks/results/bench_index_shards.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from stage_clock import cpu_seconds, peak_rss_mb

from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.build import IndexSettings, build_index
from glmrag.index.extractors.base import Extractor, PassageExtraction
from glmrag.index.shards import Shard, build_shard, merge_shards
from glmrag.io import atomic_write_text

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70 syllables
RELATIONS = 50
QUESTIONS = 100
DIM = 64
MODEL = "hash-blake2-64"


def name_of(i: int) -> str:
    """A pseudo-word phrase for entity ``i < 70^6`` (two words of three syllables; no digits)."""
    words = []
    for _ in range(2):
        word = ""
        for _ in range(3):
            i, s = divmod(i, len(SYLLABLES))
            word += SYLLABLES[s]
        words.append(word)
    return " ".join(words)


def synthetic_corpus(passages: int, per_passage: int, triples: int, seed: int = 0) -> tuple[Corpus, list[Question]]:
    """``passages`` passages whose text lists their entities and triples, and :data:`QUESTIONS` questions."""
    rng = np.random.default_rng(seed)
    vocab = 3 * passages
    popularity = (np.arange(vocab) + 1.0) ** -0.9
    ids = rng.choice(vocab, size=(passages, per_passage), p=popularity / popularity.sum())  # (P, k)
    plural = rng.random((passages, per_passage)) < 0.05  # (P, k)
    pairs = rng.integers(0, per_passage, size=(passages, triples, 2))  # (P, t, 2) positions of head and tail
    rels = rng.integers(0, RELATIONS, size=(passages, triples))  # (P, t)
    names = {}
    out = []
    for p in range(passages):
        ents = []
        for e, s in zip(ids[p].tolist(), plural[p].tolist(), strict=True):
            base = names.get(e) or names.setdefault(e, name_of(e))
            ents.append(base + " s" if s else base)
        facts = [f"{ents[h]}|rel {r}|{ents[t]}" for (h, t), r in zip(pairs[p].tolist(), rels[p].tolist(), strict=True)]
        out.append(Passage.make(f"doc {p}", ";".join(ents) + "\n" + ";".join(facts)))
    questions = [
        Question(f"q{i}", f"Where did {names[ids[i, 0]]} meet {names[ids[i, 1]]}?", ("x",), (out[i].id,))
        for i in range(QUESTIONS)
    ]
    return Corpus(out), questions


class TextTriples(Extractor):
    """Reads the entities and triples a synthetic passage's text lists (the fast stand-in extractor)."""

    name = "synthetic"

    def settings(self) -> dict:
        return {}

    def extract(self, corpus: Corpus) -> list[PassageExtraction]:
        self.report = {"passages": len(corpus)}
        out = []
        for p in corpus:
            ents, facts = p.text.split("\n")
            out.append(PassageExtraction(p.id, ents.split(";"), [tuple(f.split("|")) for f in facts.split(";")]))
        return out


class HashEmbedder:
    """Unit vectors from a phrase's BLAKE2 digest; "x s" lies close to "x" (cosine about 0.95). No model."""

    model_name = MODEL

    @staticmethod
    def _raw(text: str) -> np.ndarray:
        return np.frombuffer(hashlib.blake2b(text.encode(), digest_size=DIM).digest(), dtype=np.uint8) - 127.5

    def encode(self, texts, stage: str = "embedding", unit: str = "phrase") -> np.ndarray:
        """Shapes: texts (N,) -> (N, DIM) float32 unit rows."""
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            base = t[:-2] if t.endswith(" s") else t
            v = self._raw(base) + (0.3 * self._raw(t) if base != t else 0.0)
            out[i] = v / np.linalg.norm(v)
        return out


SETTINGS = IndexSettings(embed_model=MODEL)


def child(args: argparse.Namespace) -> dict:
    """One measurement in this process: build, one shard, or the merge."""
    start_rss = peak_rss_mb()  # the imports (numpy, scipy, glmrag.index)
    t0 = time.perf_counter()
    corpus, questions = synthetic_corpus(args.passages, args.entities_per_passage, args.triples_per_passage)
    generate = time.perf_counter() - t0
    wall, cpu = time.perf_counter(), cpu_seconds()
    result: dict = {"role": args.role, "passages": args.passages, "generate_s": round(generate, 2)}
    result["rss_start_mb"] = round(start_rss, 1)
    if args.role == "build":
        index = build_index(corpus, questions, TextTriples(), HashEmbedder(), SETTINGS)
    elif args.role == "shard":
        build_shard(corpus, TextTriples(), HashEmbedder(), SETTINGS, Shard.parse(args.shard), args.root)
        index = None
    else:
        index = merge_shards(args.root, corpus, questions, TextTriples(), HashEmbedder(), SETTINGS)
    result |= {
        "load_average": round(os.getloadavg()[0], 1),
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(cpu_seconds() - cpu, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
    if index is not None:
        result |= {"counts": index.manifest["counts"], "timings_s": index.manifest["timings_s"]}
    return result


def run_child(passages: int, role: str, extra: list[str], base: list[str], timeout: float) -> dict | None:
    """The child's measurement; None when it ran past ``timeout`` seconds (killed)."""
    cmd = [sys.executable, __file__, "--child", role, "--passages", str(passages), *base, *extra]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(json.dumps({"role": role, "passages": passages, "timed_out_s": timeout}), flush=True)
        return None
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(row), flush=True)
    return row


def slope(x, y) -> float:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--shards", type=int, nargs="*", default=[1, 2, 4])
    ap.add_argument("--shard-size", type=int, default=100_000)
    ap.add_argument("--entities-per-passage", type=int, default=6)
    ap.add_argument("--triples-per-passage", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=600, help="seconds one child may run before it is killed")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", choices=["build", "shard", "merge"], default=None, dest="role")
    ap.add_argument("--passages", type=int, default=0)
    ap.add_argument("--shard", default=None)
    ap.add_argument("--root", default=None)
    args = ap.parse_args()
    if args.role is not None:
        print(json.dumps(child(args)))
        return
    base = ["--entities-per-passage", str(args.entities_per_passage)]
    base += ["--triples-per-passage", str(args.triples_per_passage)]
    sizes = [row for n in args.sizes if (row := run_child(n, "build", [], base, args.timeout)) is not None]
    shards = []
    for n in args.shards:
        with tempfile.TemporaryDirectory(prefix="glmrag-shards-") as root:
            parts = [
                run_child(args.shard_size, "shard", ["--shard", f"{i}/{n}", "--root", root], base, args.timeout)
                for i in range(n)
            ]
            merged = run_child(args.shard_size, "merge", ["--root", root], base, args.timeout)
        if merged is None or None in parts:
            continue
        slowest = max(p["wall_s"] for p in parts)
        shards.append(
            {
                "shards": n,
                "parts": parts,
                "merge": merged,
                "slowest_shard_wall_s": slowest,
                "estimated_wall_s": round(slowest + merged["wall_s"], 2),
                "peak_rss_mb": max(p["peak_rss_mb"] for p in [*parts, merged]),
            }
        )
        print(json.dumps({k: v for k, v in shards[-1].items() if k not in ("parts", "merge")}), flush=True)
    fits = {}
    if len(sizes) > 1:
        x = [r["passages"] for r in sizes]
        fits = {key: slope(x, [r[key] for r in sizes]) for key in ("wall_s", "cpu_s")}
        fits["peak_rss_mb above start"] = slope(x, [r["peak_rss_mb"] - r["rss_start_mb"] for r in sizes])
        for stage in sizes[0]["timings_s"]:
            if all(r["timings_s"][stage] > 0 for r in sizes):
                fits[f"stage:{stage}"] = slope(x, [r["timings_s"][stage] for r in sizes])
        print(json.dumps({"exponents": {k: round(v, 2) for k, v in fits.items()}}))
    if args.out is not None:
        record = {"argv": sys.argv, "sizes": sizes, "shards": shards, "exponents": fits}
        atomic_write_text(args.out, json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
