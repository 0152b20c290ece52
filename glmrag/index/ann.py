"""Approximate synonym search for large entity groups: an inverted-file index (faiss) in place of the exact scan.

The exact search of :func:`glmrag.index.resolve.synonym_pairs` costs ``m^2 d`` for a group of ``m``
entities, which overtakes embedding at a few hundred thousand entities (``benchmarks/scaling.md``).
Above ``IndexSettings.synonym_exact_max`` members a group is searched by :func:`ivf_candidates` with
faiss's ``IndexIVFFlat`` (inner product; Jégou et al., 2011): k-means cells, each entity compared only
with the members of its :data:`N_PROBE` nearest cells, about ``10 m^1.5 d`` in all. Scores are exact
inner products, so every returned pair qualifies; a pair whose partner lies in an unprobed cell is
missed (recall in ``benchmarks/scaling.md``). k-means runs in one thread from a fixed seed: the same
embeddings always give the same pairs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CELLS_PER_ROOT = 4
"""Cells per square root of the group size (faiss's guideline: 4-16). Sweep in ``benchmarks/scaling.md``: at 20k
synthetic entities 4 sqrt(m) cells took 3.9 s at recall 0.9995 (exact: 6.8 s); at 50k, fixed 64 or 256 entities
per cell took 20 or 58 s at recall 0.9965 or 0.985 (exact: 46 s)."""
N_PROBE = 8
"""Cells scanned per entity (recall of the exact pairs at threshold 0.8: 0.9989-0.9998 on synthetic sets of
10k-30k entities; 0.980 on the 2Wiki entities as one group, 0.990 there with 16 probes; ``benchmarks/scaling.md``)."""
TRAIN_PER_LIST = 40
"""k-means training points per cell (faiss warns below 39)."""
QUERY_ROWS = 8192
"""Queries per faiss call (one progress step)."""


def _faiss():
    try:
        import faiss
    except ImportError as err:  # a core dependency: only a broken install gets here
        raise ImportError(
            "synonym search over a group larger than IndexSettings.synonym_exact_max needs faiss: "
            "pip install faiss-cpu (or raise synonym_exact_max to keep the exact search)"
        ) from err
    return faiss


def ivf_candidates(
    keys: np.ndarray,
    queries: np.ndarray,
    threshold: float,
    advance: Callable[[int], None] = lambda n: None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(q, j)`` with ``keys[q] . keys[j] >= threshold`` and ``j != q`` that the probed cells hold.

    The caller orders them and keeps each query's top-k, as for the exact search. ``advance(n)`` is
    called after each ``n`` queries.

    Shapes: ``keys`` (m, d) unit rows; ``queries`` (q,) int64 rows of ``keys`` -> rows (s,), cols (s,)
    int64 (rows of ``keys``), scores (s,) float32.

    k-means cuts the group into ``c = CELLS_PER_ROOT * sqrt(m)`` cells (faiss's guideline of 4-16 sqrt(m));
    the nearest cells are found by an exact search over the centres (an HNSW graph there put entities in the
    wrong cells and lost 5% of the pairs). Costs: k-means ``TRAIN_PER_LIST * c^2 * d``, linear in ``m``;
    assigning and probing ``2 m c d``; scanning ``m * N_PROBE * (m / c) * d``: all grow as ``m^1.5``
    (exponents measured in ``benchmarks/scaling.md``).
    """
    faiss = _faiss()
    keys = np.ascontiguousarray(keys, dtype=np.float32)
    m, d = keys.shape
    cells = max(1, round(CELLS_PER_ROOT * np.sqrt(m)))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, cells, faiss.METRIC_INNER_PRODUCT)
    sample = np.random.default_rng(0).choice(m, min(m, TRAIN_PER_LIST * cells), replace=False)
    index.cp.seed = 0
    index.cp.max_points_per_centroid = TRAIN_PER_LIST
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # parallel k-means sums depend on thread timing
    try:
        index.train(keys[np.sort(sample)])
        index.add(keys)
    finally:
        faiss.omp_set_num_threads(threads)
    index.nprobe = N_PROBE
    radius = float(np.nextafter(np.float32(threshold), np.float32(-np.inf)))  # faiss keeps scores > radius
    found_rows, found_cols, found_scores = [], [], []
    for start in range(0, len(queries), QUERY_ROWS):
        rows = queries[start : start + QUERY_ROWS]
        limits, scores, cols = index.range_search(keys[rows], radius)  # CSR: hits of query i at limits[i]:[i+1]
        hit_rows = np.repeat(rows, np.diff(limits).astype(np.int64))
        keep = (scores >= threshold) & (cols != hit_rows)
        found_rows.append(hit_rows[keep].astype(np.int64))
        found_cols.append(cols[keep].astype(np.int64))
        found_scores.append(scores[keep].astype(np.float32))
        advance(len(rows))
    if not found_rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    return np.concatenate(found_rows), np.concatenate(found_cols), np.concatenate(found_scores)
