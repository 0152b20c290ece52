"""Training-free Personalized PageRank retriever, HippoRAG-style (HippoRAG's own rules: :mod:`.hipporag`).

This is glmrag's PPR on the index's graph, shared with the GNN's prior and HyperAddress; it differs from
HippoRAG's code in edge weights, self-loops, passage scores, linking and the no-link case
(``docs/fidelity.md``, "Training-free baselines").

HippoRAG (Gutiérrez et al., 2024, §2.2 "Retrieval") runs Personalized
PageRank over the KG from the question's linked entities, weights each of them
by its *node specificity* ``1 / |passages mentioning it|``, and scores a
passage by the PPR mass of its entities (passage matrix ``P^T`` times the PPR
vector). Its damping factor is 0.5 (HippoRAG, implementation details), the
probability of following an edge rather than restarting.

The walk is on the undirected multigraph of the index's triples, synonym
(``equivalent``) edges included: each triple links head and tail both ways with
weight 1 (parallel triples add up; a self-loop counts once), so the transition
matrix is row-normalised adjacency. The power iteration is
:mod:`glmrag.graph.pagerank`'s, with the conventions of ``networkx.pagerank``,
which the tests compare against: an entity without edges (dangling) sends its
mass to the restart distribution.

A question with no linked entity restarts uniformly over all entities, i.e.
gets the global PageRank: a popularity prior rather than no ranking, since a
retriever promises ``top_k`` passages. Such questions are counted in
:attr:`PPRRetriever.fallbacks`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, Question
from glmrag.graph.pagerank import HIPPORAG_DAMPING, Walk, personalized_pagerank, transition
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, rank_passages, top_k_stable
from glmrag.retrievers.base import Ranking

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RandomWalk(Walk):
    """The walk on the index's entities (:class:`~glmrag.graph.pagerank.Walk`) and each entity's specificity."""

    specificity: np.ndarray
    """(E,) node specificity ``1 / |passages mentioning e|`` (1 for entities in no passage)."""


def random_walk(index: KGIndex) -> RandomWalk:
    """Build the random walk on the undirected multigraph of ``index.triples``."""
    heads, tails = index.triples[:, 0], index.triples[:, 2]
    loop = heads == tails
    src = np.concatenate([heads, tails[~loop]])  # a self-loop is one edge, as in networkx
    dst = np.concatenate([tails, heads[~loop]])
    n = index.num_entities
    adjacency = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(n, n))  # duplicates summed
    transition_t, dangling = transition(adjacency)
    count = index.entity_passage_count
    return RandomWalk(transition_t, dangling, 1.0 / np.maximum(count, 1.0))


class PPRRetriever:
    """HippoRAG-style PPR from the linked question entities; passages ranked by entity mass.

    ``ranker`` is a passage ranker of :mod:`glmrag.index.ranking`;
    the default ``simple`` (sum of PPR over a passage's entities) is HippoRAG's.
    The walk is built once per index (:meth:`prepare`, cached for the last
    index seen) and questions run ``batch_size`` at a time as columns of one
    restart matrix.
    """

    name = "ppr"

    def __init__(
        self,
        damping: float = HIPPORAG_DAMPING,
        tol: float = 1e-6,
        dtype: str = "float32",
        batch_size: int = 128,
        ranker: str = "simple",
        top_entities: int = 100,
    ) -> None:
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping={damping} must be in [0, 1)")
        self.damping, self.tol, self.dtype = damping, tol, np.dtype(dtype)
        self.batch_size, self.ranker, self.top_entities = batch_size, ranker, top_entities
        self._cache: tuple[KGIndex, RandomWalk] | None = None
        self.fallbacks = 0
        """Questions of the last :meth:`retrieve` call without a linked entity (uniform restart)."""

    def prepare(self, index: KGIndex) -> RandomWalk:
        """The random walk of ``index``, built on first use and kept while the same index is passed."""
        if self._cache is None or self._cache[0] is not index:
            self._cache = (index, random_walk(index))
        return self._cache[1]

    def restart(self, questions: Sequence[Question], index: KGIndex) -> tuple[np.ndarray, np.ndarray]:
        """Restart distributions (linked entities weighted by node specificity) and which questions had none.

        Shapes: -> (E, B) float64 columns summing to 1, (B,) bool.
        """
        walk = self.prepare(index)
        restart = np.zeros((len(questions), index.num_entities))  # (B, E)
        empty = np.zeros(len(questions), dtype=bool)
        for b, q in enumerate(questions):
            seeds = index.seeds(q.id)
            if seeds:
                restart[b, seeds] = walk.specificity[seeds] / walk.specificity[seeds].sum()
            else:
                restart[b] = 1.0 / index.num_entities
                empty[b] = True
        return restart.T, empty

    def entity_scores(self, questions: Sequence[Question], index: KGIndex) -> np.ndarray:
        """PPR probability of every entity for each question. Shapes: -> (B, E) ``dtype``, rows summing to 1."""
        restart, empty = self.restart(questions, index)
        scores = personalized_pagerank(self.prepare(index), restart, self.damping, self.tol, self.dtype)
        self.fallbacks += int(empty.sum())
        return np.ascontiguousarray(scores.T)

    def retrieve(
        self, questions: Sequence[Question], index: KGIndex, corpus: Corpus | None = None, top_k: int = 10
    ) -> list[Ranking]:
        """Rank passages (``index.passage_ids``) by PPR mass; also return the top entities by PPR."""
        self.fallbacks = 0
        rankings: list[Ranking] = []
        for start in range(0, len(questions), self.batch_size):
            batch = questions[start : start + self.batch_size]
            scores = self.entity_scores(batch, index)  # (B, E)
            positions, values = rank_passages(scores, index, top_k, method=self.ranker)
            entities, entity_values = top_k_stable(scores, self.top_entities)  # ties by entity id
            rankings += make_rankings(
                [q.id for q in batch], index.passage_ids, positions, values, entities, entity_values
            )
        if self.fallbacks:
            log.warning(
                "PPR: %d of %d questions have no linked entity; used global PageRank", self.fallbacks, len(questions)
            )
        return rankings
