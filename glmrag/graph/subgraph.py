"""Budgeted subgraph selection around the seed entities of a question (GLM-RAG App. B.2).

The GLM cannot encode a whole KG, so it reads at most ``max_triplets`` triples within ``max_hops`` hops
of the question's seed entities: first the triples joining two seeds, then a randomized BFS from the
seeds (App. B.2, "Hop Prioritization"; defaults ``max_hops=2, max_triplets=600``, GLM-RAG Table 14).
The ``max_hops``-hop neighbourhood is what a BFS of ``max_hops`` levels traverses, edges followed both
ways: hop ``h`` adds the triples incident to the entities at distance ``h - 1``, so a triple joining two
entities both at distance ``max_hops`` is outside it (:func:`glmrag.graph.traverse.neighbourhood_triples`
counts the same set).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.graph.traverse import incident_edges
from glmrag.index.kg import KGIndex

MAX_HOPS = 2
"""GLM-RAG App. B.2: "we set max_hops=2"."""
MAX_TRIPLETS = 600
"""GLM-RAG App. B.2: "we set ... max_triplets=600"."""


@dataclass(frozen=True)
class Subgraph:
    """The triples selected for one question, in selection order."""

    triples: np.ndarray
    """(S,) int64 rows of ``index.triples``, in the order they were selected."""
    hop: np.ndarray
    """(S,) int64 BFS level at which each triple was selected; seed-connecting triples are hop 1."""
    entities: np.ndarray
    """(N,) int64 entity ids: the seeds first, then endpoints of :attr:`triples` in first-touched order."""
    seeds: np.ndarray
    """(K,) int64 the seed entities, de-duplicated, in the given order."""
    truncated: bool
    """True when the budget left out part of the ``max_hops`` neighbourhood."""

    def __len__(self) -> int:
        return len(self.triples)


def select_subgraph(
    index: KGIndex,
    seeds: Sequence[int],
    max_hops: int = MAX_HOPS,
    max_triplets: int = MAX_TRIPLETS,
    seed: int = 0,
) -> Subgraph:
    """Select at most ``max_triplets`` triples within ``max_hops`` hops of ``seeds``.

    Order of selection:

    1. triples whose head and tail are two distinct seeds, in random order;
    2. a randomized BFS: at hop ``h = 1 .. max_hops`` the edges incident to the
       entities at distance ``h - 1`` are visited in a uniformly random order
       and each not-yet-selected triple is added (once, even when it is reached
       from both ends) until the budget is spent.

    Promises: the result is a deterministic function of the arguments; when the
    neighbourhood fits the budget it is returned whole (``truncated`` False);
    a smaller budget selects a prefix of what a larger one selects (same
    ``seed``), and fewer hops a prefix of what more hops select. Seeds that
    repeat are used once; no seeds (or ``max_hops == 0``) gives no triples.
    """
    if max_hops < 0 or max_triplets < 0:
        raise ValueError(f"max_hops={max_hops} and max_triplets={max_triplets} must be >= 0")
    seed_ids = np.fromiter(dict.fromkeys(int(s) for s in seeds), dtype=np.int64)
    if seed_ids.size and (seed_ids.min() < 0 or seed_ids.max() >= index.num_entities):
        raise ValueError(f"seed entities {seed_ids.tolist()} outside the index's {index.num_entities} entities")
    if seed_ids.size == 0 or max_hops == 0:
        return _result(index, np.empty(0, np.int64), np.empty(0, np.int64), seed_ids, truncated=False)

    adj = index.adjacency
    rng = np.random.default_rng(seed)
    taken = np.zeros(len(index.triples), dtype=bool)
    visited = np.zeros(index.num_entities, dtype=bool)
    visited[seed_ids] = True
    budget = max_triplets
    chosen: list[np.ndarray] = []
    hops: list[np.ndarray] = []

    # 1. triples joining two distinct seeds (GLM-RAG App. B.2: prioritised first)
    edges = incident_edges(adj.indptr, seed_ids)  # (n,) edges leaving the seeds
    joins = edges[visited[adj.neighbor[edges]]]
    pairs = index.triples[adj.triple[joins]]
    between = np.unique(adj.triple[joins][pairs[:, 0] != pairs[:, 2]])
    between = between[rng.permutation(between.size)]
    truncated = between.size > budget
    between = between[:budget]
    taken[between] = True
    budget -= between.size
    chosen.append(between)
    hops.append(np.ones(between.size, np.int64))

    # 2. randomized BFS, one hop at a time; stop as soon as the budget is spent
    frontier = seed_ids
    for hop in range(1, max_hops + 1):
        if truncated or frontier.size == 0:
            break
        if hop > 1:
            edges = incident_edges(adj.indptr, frontier)
        candidates = adj.triple[edges]
        candidates = candidates[~taken[candidates]]  # (n,) each triple at most twice (once per end)
        if budget == 0:
            truncated = candidates.size > 0
            break
        picked, truncated = _first_distinct(candidates[rng.permutation(candidates.size)], budget)
        taken[picked] = True
        budget -= picked.size
        chosen.append(picked)
        hops.append(np.full(picked.size, hop, np.int64))
        if hop < max_hops:
            reached = adj.neighbor[edges]
            frontier = np.unique(reached[~visited[reached]])  # entities at distance `hop`
            visited[frontier] = True
    return _result(index, np.concatenate(chosen), np.concatenate(hops), seed_ids, truncated)


def _first_distinct(shuffled: np.ndarray, budget: int) -> tuple[np.ndarray, bool]:
    """The first ``budget`` distinct values of ``shuffled`` in order, and whether more distinct values remain.

    Every value occurs at most twice, so the first ``2 * budget`` entries hold at
    least ``budget`` distinct values when there are that many: only that prefix
    is de-duplicated, which keeps the cost independent of hub degrees.

    Shapes: ``shuffled`` (n,) -> (min(budget, distinct),).
    """
    head = shuffled[: 2 * budget]
    _, first = np.unique(head, return_index=True)
    distinct = head[np.sort(first)]
    more = distinct.size > budget or shuffled.size > head.size
    return distinct[:budget], bool(more)


def _result(index: KGIndex, triples: np.ndarray, hop: np.ndarray, seeds: np.ndarray, truncated: bool) -> Subgraph:
    """Assemble a :class:`Subgraph`, listing the seeds then the triples' endpoints in first-touched order."""
    ends = index.triples[triples][:, [0, 2]].ravel()  # (2S,) head, tail, head, tail, ...
    touched = np.concatenate([seeds, ends])
    _, first = np.unique(touched, return_index=True)
    return Subgraph(triples, hop, touched[np.sort(first)], seeds, truncated)


def subgraph_prefix_entities(index: KGIndex, subgraph: Subgraph, n_triples: int) -> np.ndarray:
    """Entities of the first ``n_triples`` selected triples plus the seeds (unordered).

    With the prefix promises of :func:`select_subgraph`, the subgraph for a
    smaller budget or fewer hops is a prefix of a larger one: this gives its
    entities without selecting again.

    Shapes: -> (N,) int64 sorted entity ids.
    """
    ends = index.triples[subgraph.triples[:n_triples]][:, [0, 2]].ravel()
    return np.unique(np.concatenate([subgraph.seeds, ends]))
