"""Personalized PageRank by power iteration: the one walk of the PPR and HyperAddress retrievers.

A :class:`Walk` is the Markov chain of a weighted directed graph: from ``u`` to ``v`` with probability
``W[u, v] / sum_v' W[u, v']``; a node whose out-weights sum to zero is *dangling*. With damping ``alpha``
(the probability of following an edge) and restart distribution ``r``, PPR is the fixed point of
``x <- alpha (T x + (d . x) r) + (1 - alpha) r`` (``T`` the transposed transition matrix, ``d`` the
dangling nodes, whose mass restarts): the conventions of ``networkx.pagerank``, which the tests compare
against. HippoRAG's PPR walks the KG's entities (:mod:`glmrag.retrievers.ppr`); HyperAddress walks the
passage-entity graph of its hypergraph (Read the Route §4.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

HIPPORAG_DAMPING = 0.5
"""HippoRAG's PPR damping, the probability of following an edge (Gutiérrez et al., 2024, implementation details;
its code's main experiments, ``run_hipporag_main_exps.sh``: ``--damping 0.5``, where the code's default is 0.1).
Every walk that follows HippoRAG reads it from here: the PPR retriever, HippoRAG's own rules, the retrievers'
prior, HyperAddress (whose paper does not state its value), and the configs as ``${glmrag_const:HIPPORAG_DAMPING}``."""


@dataclass(frozen=True)
class Walk:
    """The transition of a random walk, transposed for ``T x`` products over a batch of columns."""

    transition_t: sp.csr_matrix
    """(N, N) ``transition_t[v, u] = Pr(u -> v)``: column ``u`` sums to 1 unless ``u`` is dangling."""
    dangling: np.ndarray
    """(N,) bool, nodes whose out-weights sum to zero."""


def transition(weights: sp.spmatrix) -> tuple[sp.csr_matrix, np.ndarray]:
    """Row-normalise non-negative edge weights ``W[u, v]`` into ``(transition_t, dangling)`` of a :class:`Walk`.

    Shapes: ``weights`` (N, N) -> (N, N) csr, (N,) bool.
    """
    out = np.asarray(weights.sum(axis=1)).ravel()  # (N,)
    inv = np.divide(1.0, out, out=np.zeros_like(out, dtype=np.float64), where=out > 0)
    return (sp.diags(inv) @ weights).T.tocsr(), out <= 0


def undirected_weights(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """``W = A + A^T`` for the weighted edges ``A[src, dst] += weight``: the walk of an undirected multigraph.

    Parallel edges add up, and a self-loop weighs twice in its row (it is both ends of one edge), which is how
    ``igraph``'s undirected ``personalized_pagerank`` (HippoRAG's solver) reads one.

    Shapes: ``src``, ``dst``, ``weight`` (M,) -> (N, N) csr.
    """
    one_way = sp.csr_matrix((np.asarray(weight, dtype=np.float64), (src, dst)), shape=(num_nodes, num_nodes))
    return (one_way + one_way.T).tocsr()


def iterations_for(damping: float, tol: float) -> int:
    """Power iterations after which every column is within ``tol`` (L1) of its PageRank.

    The iteration map contracts L1 distances on the simplex by ``damping``, and
    the start (the restart vector) is within 2 of the fixed point, so
    ``2 * damping ** k < tol`` suffices. A fixed count needs no per-iteration
    error check (which costs as much as the sparse product).
    """
    if damping == 0.0:
        return 1
    return max(1, int(np.ceil(np.log(tol / 2.0) / np.log(damping))))


def personalized_pagerank(
    walk: Walk, restart: np.ndarray, damping: float, tol: float = 1e-6, dtype=np.float64
) -> np.ndarray:
    """PageRank of every column of ``restart`` by power iteration, within ``tol`` in L1 of the exact one.

    Iterates ``x <- damping * (T x + (dangling . x) r) + (1 - damping) r``
    :func:`iterations_for` times, starting from ``x = r``. Columns of
    ``restart`` must sum to 1. In float32 rounding (about 1e-7 relative) sits
    below a ``tol`` of 1e-6; pass float64 for tighter tolerances.

    Shapes: ``restart`` (N, B) -> (N, B) ``dtype`` with columns summing to 1.
    """
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping={damping} must be in [0, 1)")
    restart = np.asarray(restart)
    rows, cols = np.nonzero(restart)  # restarts are sparse: a few seeds per column (dense only for fallbacks)
    weights = restart[rows, cols].astype(dtype)
    transition_t = walk.transition_t.astype(dtype)
    dangling = walk.dangling.astype(dtype) if walk.dangling.any() else None
    x = np.ascontiguousarray(restart, dtype=dtype)
    for _ in range(iterations_for(damping, tol)):
        # mass on nodes without out-edges goes back to the restart distribution, as in networkx
        leaked = dangling @ x if dangling is not None else np.zeros(x.shape[1], dtype)  # (B,)
        x = transition_t @ x  # (N, B)
        x *= damping
        x[rows, cols] += weights * ((1.0 - damping) + damping * leaked[cols])
    return x
