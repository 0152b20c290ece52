"""Breadth-first traversals of a KG index, shared by subgraph selection and analyses."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from glmrag.index.kg import KGIndex


def bfs_distances(index: KGIndex, seeds: Iterable[int], cutoff: int = 10) -> dict[int, int]:
    """Hop distance from the nearest seed to every entity within ``cutoff`` hops.

    Edges are followed in both directions (a triple links its head and tail
    either way), as in GLM-RAG App. D.1, whose depth analysis uses a BFS with
    a cutoff of 10 hops. Entities farther than ``cutoff`` are absent.
    """
    adj = index.adjacency
    dist = np.full(index.num_entities, -1, dtype=np.int64)
    frontier = np.unique(np.fromiter((int(s) for s in seeds), dtype=np.int64))
    dist[frontier] = 0
    for hop in range(1, cutoff + 1):
        if frontier.size == 0:
            break
        reached = np.unique(adj.neighbor[incident_edges(adj.indptr, frontier)])
        frontier = reached[dist[reached] < 0]
        dist[frontier] = hop
    found = np.flatnonzero(dist >= 0)
    return dict(zip(found.tolist(), dist[found].tolist(), strict=True))


def neighbourhood_triples(index: KGIndex, seeds: Iterable[int], hops: int = 2) -> int:
    """Number of distinct triples with an endpoint within ``hops - 1`` hops of a seed.

    This is the size of the ``hops``-hop neighbourhood from which a subgraph is
    selected; its terciles are the density groups of GLM-RAG Fig. 17.
    """
    adj = index.adjacency
    inner = [v for v, d in bfs_distances(index, seeds, cutoff=max(hops - 1, 0)).items() if d <= hops - 1]
    if not inner:
        return 0
    triples = np.concatenate([adj.triple[adj.edges_of(v)] for v in inner])
    return int(np.unique(triples).size)


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
