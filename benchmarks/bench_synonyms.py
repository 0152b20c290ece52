"""Synonym search: exact (blocked) against approximate (HNSW), cost growth and recall (issue 16 item 5).

On synthetic entity sets (``glmrag.index.synthetic.clustered_embeddings``: dim 384, Zipf-sized
clusters of spellings) of ``--sizes`` entities, and optionally on real entity embeddings
(``--real FILE.npy``, e.g. a saved index's ``entity_embeddings.npy``), one group, all entities
eligible, GFM-RAG's threshold 0.8 and top-k 100 (GLM-RAG Table 14 via ``IndexSettings``). CPU seconds of
this process (``time.process_time``; the machine is shared), one thread for both. Exact runs only up to
``--exact-max`` entities (it grows with the square). Recall = share of the exact pairs that the
approximate search returns; ``extra`` = returned pairs the exact search does not have (must be 0 up to
float rounding at the threshold).

    python benchmarks/bench_synonyms.py --sizes 10000 30000 100000 300000 1000000 --exact-max 100000 \\
        --out benchmarks/results/bench_synonyms.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from glmrag.index.resolve import synonym_pairs
from glmrag.index.synthetic import clustered_embeddings
from glmrag.io import atomic_write_text

THRESHOLD, TOP_K = 0.8, 100  # IndexSettings defaults (GFM-RAG kg_constructor)


def cpu(fn):
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def measure(emb: np.ndarray, exact: bool, label: str) -> dict:
    n = len(emb)
    approx_s, (pairs, _) = cpu(lambda: synonym_pairs(emb, THRESHOLD, TOP_K, exact_max=0))
    row = {"set": label, "entities": n, "approx_s": round(approx_s, 2), "approx_pairs": len(pairs)}
    if exact:
        exact_s, (reference, _) = cpu(lambda: synonym_pairs(emb, THRESHOLD, TOP_K))
        want = set(map(tuple, reference.tolist()))
        got = set(map(tuple, pairs.tolist()))
        row |= {
            "exact_s": round(exact_s, 2),
            "exact_pairs": len(want),
            "recall": round(len(got & want) / max(len(want), 1), 5),
            "extra": len(got - want),
        }
    print(json.dumps(row), flush=True)
    return row


def slope(rows: list[dict], key: str) -> float | None:
    pts = [(r["entities"], r[key]) for r in rows if key in r and r["set"] == "synthetic"]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([max(p[1], 1e-3) for p in pts])
    return round(float(np.polyfit(x, y, 1)[0]), 2)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    synthetic = [r for r in rows if r["set"] == "synthetic"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label, style in (("exact_s", "exact, blocked", "o-"), ("approx_s", "IVF (faiss), m > exact_max", "s--")):
        pts = [(r["entities"], r[key]) for r in synthetic if key in r]
        ax.loglog(*zip(*pts, strict=True), style, label=f"{label} (slope {slope(rows, key)})")
    ax.set_xlabel("entities in one group (dim 384)")
    ax.set_ylabel("CPU s, one thread")
    ax.set_title("Synonym search, threshold 0.8, top-k 100")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--exact-max", type=int, default=100_000, help="largest size also searched exactly")
    parser.add_argument("--real", type=Path, default=None, help="an (E, d) float32 .npy of unit entity embeddings")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_synonyms.json"))
    parser.add_argument("--replot", action="store_true", help="only redraw the PNG from --out")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads(args.out.read_text())["rows"], args.out.with_suffix(".png"))
        return
    import faiss

    faiss.omp_set_num_threads(1)
    rows = []
    if args.real is not None:
        rows.append(measure(np.load(args.real), True, args.real.name))
    for n in args.sizes:
        rows.append(measure(clustered_embeddings(n), n <= args.exact_max, "synthetic"))
    result = {
        "rows": rows,
        "growth_exponents": {"exact_s": slope(rows, "exact_s"), "approx_s": slope(rows, "approx_s")},
        "load_average": os.getloadavg(),
    }
    print(text := json.dumps(result, indent=2))
    atomic_write_text(args.out, text + "\n")
    plot(rows, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
