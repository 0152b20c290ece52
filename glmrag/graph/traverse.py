"""Breadth-first traversals of a KG index, shared by subgraph selection and analyses."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from glmrag.index.kg import KGIndex


def hop_distances(index: KGIndex, seeds: Iterable[int], cutoff: int = 10) -> np.ndarray:
    """Hop distance from the nearest seed of every entity, ``-1`` beyond ``cutoff`` hops or unreachable.

    Edges are followed in both directions (a triple links its head and tail
    either way), as in GLM-RAG App. D.1, whose depth analysis uses a BFS with
    a cutoff of 10 hops. Each hop gathers the CSR neighbours of the frontier
    and keeps the unvisited ones through a boolean mark (no sort, no dict), so
    a search costs O(edges of the reached entities + hops * E / 8 bytes).

    Shapes: -> ``(E,)``, int8 when ``cutoff`` <= 127 (the paper's 10 fits; 1,000 questions of a 59k-entity
    KG then hold 59 MB), int32 otherwise.
    """
    if cutoff < 0:
        raise ValueError(f"cutoff must be >= 0 hops, got {cutoff}")
    adj = index.adjacency
    dist = np.full(index.num_entities, -1, dtype=np.int8 if cutoff <= np.iinfo(np.int8).max else np.int32)
    frontier = np.unique(np.fromiter((int(s) for s in seeds), dtype=np.int64))
    dist[frontier] = 0
    mark = np.zeros(index.num_entities, dtype=bool)
    for hop in range(1, cutoff + 1):
        if frontier.size == 0:
            break
        reached = adj.neighbor[incident_edges(adj.indptr, frontier)]
        mark[reached[dist[reached] < 0]] = True
        frontier = np.flatnonzero(mark)
        mark[frontier] = False
        dist[frontier] = hop
    return dist


def bfs_distances(index: KGIndex, seeds: Iterable[int], cutoff: int = 10) -> dict[int, int]:
    """:func:`hop_distances` as a dict, entity -> hops, of the entities within ``cutoff`` hops only."""
    dist = hop_distances(index, seeds, cutoff)
    found = np.flatnonzero(dist >= 0)
    return dict(zip(found.tolist(), dist[found].tolist(), strict=True))


def neighbourhood_triples(index: KGIndex, seeds: Iterable[int], hops: int = 2) -> int:
    """Number of distinct triples with an endpoint within ``hops - 1`` hops of a seed.

    This is the size of the ``hops``-hop neighbourhood from which a subgraph is
    selected; its terciles are the density groups of GLM-RAG Fig. 17.
    """
    if hops < 1:
        return 0
    radius = hops - 1
    return triples_within(index, hop_distances(index, seeds, cutoff=radius), radius)


def triples_within(index: KGIndex, distances: np.ndarray, radius: int) -> int:
    """Number of distinct triples with an endpoint at most ``radius`` hops away in ``distances``.

    ``distances`` is a :func:`hop_distances` result whose cutoff is at least ``radius``, so one search
    serves both the depth measures (cutoff 10) and the density (radius 1) of a question.

    Shapes: **distances** ``(E,)`` -> int.
    """
    inner = np.flatnonzero((distances >= 0) & (distances <= radius))
    if inner.size == 0:
        return 0
    adj = index.adjacency
    return int(np.unique(adj.triple[incident_edges(adj.indptr, inner)]).size)


def incident_edges(indptr: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Positions in a CSR edge list of every edge leaving ``nodes``, node by node, in CSR order.

    Vectorised gather (no Python loop over nodes): use it with
    ``KGIndex.adjacency.indptr`` and index ``neighbor`` / ``triple`` with the result.

    Shapes: ``indptr`` (E + 1,), ``nodes`` (N,) -> (sum of the N degrees,) int64.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    starts = indptr[nodes]
    lengths = indptr[nodes + 1] - starts
    # each node's block starts at its CSR offset; subtract where the block starts in the output
    block_start = np.cumsum(lengths) - lengths
    return np.repeat(starts - block_start, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
