"""The knowledge-graph index every retriever reads.

A :class:`KGIndex` holds the entity and relation vocabularies, the triples
(synonym edges included, typed ``equivalent``), the passage<->entity map, the
entity embeddings and the question-entity links of one dataset. It is built by
:func:`glmrag.index.build.build_index` and stored by :mod:`glmrag.index.store`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp

SYNONYM_RELATION = "equivalent"
INVERSE_PREFIX = "inverse_"


@dataclass(frozen=True)
class EntityLink:
    """A question mention linked to a KG entity, with the similarity of the link."""

    mention: str
    entity: int
    score: float


@dataclass(frozen=True)
class Adjacency:
    """CSR adjacency over both directions of every triple.

    Row ``u`` lists the edges leaving ``u``: ``neighbor[indptr[u]:indptr[u+1]]``.
    A triple ``(h, r, t)`` gives the edge ``h -> t`` typed ``r`` and the edge
    ``t -> h`` typed ``r + num_relations`` (the relation ``inverse_<r>``).
    ``triple`` maps each edge back to its row in ``KGIndex.triples``.
    """

    indptr: np.ndarray  # (E + 1,) int64
    neighbor: np.ndarray  # (2T,) int64
    edge_type: np.ndarray  # (2T,) int64
    triple: np.ndarray  # (2T,) int64

    def edges_of(self, u: int) -> slice:
        return slice(int(self.indptr[u]), int(self.indptr[u + 1]))

    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)


@dataclass
class KGIndex:
    entities: list[str]
    """Normalised entity phrases; an entity's id is its position."""
    relations: list[str]
    """Relation phrases; ``equivalent`` marks synonym edges."""
    triples: np.ndarray
    """(T, 3) int64 rows ``(head, relation, tail)``; every relation between a pair is kept."""
    passage_ids: list[str]
    """Passage ids of the corpus, in corpus order; a passage's column is its position."""
    entity_passages: sp.csr_matrix
    """(E, P) binary: entity e is mentioned in passage p."""
    entity_embeddings: np.ndarray | None = None
    """(E, d) float32, L2-normalised, or None when built without an embedder."""
    question_links: dict[str, list[EntityLink]] = field(default_factory=dict)
    """Question id -> linked question entities (the seeds of graph retrievers)."""
    manifest: dict = field(default_factory=dict)
    """What built this index (format version, dataset hash, extractor, settings, counts)."""
    passage_facts: sp.csr_matrix | None = None
    """(P, T) counts: how many times passage p states the fact ``triples[t]`` (after normalisation, so "works
    at" and "works at!" are one fact stated twice); synonym rows belong to no passage. None for an index not
    built from per-passage extractions (a GFM-RAG import, a synthetic graph): HippoRAG's scores need it."""

    def __post_init__(self) -> None:
        self.triples = np.asarray(self.triples, dtype=np.int64).reshape(-1, 3)
        self.entity_passages = sp.csr_matrix(self.entity_passages, dtype=np.float32)
        n_e, n_p = self.entity_passages.shape
        if n_e != len(self.entities) or n_p != len(self.passage_ids):
            raise ValueError(
                f"entity_passages has shape {(n_e, n_p)}, expected "
                f"({len(self.entities)}, {len(self.passage_ids)}) = (entities, passages)"
            )
        if self.passage_facts is not None:
            self.passage_facts = sp.csr_matrix(self.passage_facts, dtype=np.float32)
            if self.passage_facts.shape != (n_p, len(self.triples)):
                raise ValueError(
                    f"passage_facts has shape {self.passage_facts.shape}, expected "
                    f"({n_p}, {len(self.triples)}) = (passages, triples)"
                )
        if len(self.triples) and (
            self.triples[:, [0, 2]].max() >= n_e or self.triples[:, 1].max() >= len(self.relations)
        ):
            raise ValueError("triples refer to entity or relation ids outside the vocabularies")

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    @property
    def num_passages(self) -> int:
        return len(self.passage_ids)

    @cached_property
    def entity_id(self) -> dict[str, int]:
        return {e: i for i, e in enumerate(self.entities)}

    @cached_property
    def passage_position(self) -> dict[str, int]:
        return {p: i for i, p in enumerate(self.passage_ids)}

    @cached_property
    def passage_entities(self) -> sp.csr_matrix:
        """(P, E) transpose of :attr:`entity_passages`."""
        return self.entity_passages.T.tocsr()

    @cached_property
    def entity_passage_count(self) -> np.ndarray:
        """(E,) number of passages mentioning each entity (at least 1 for linked entities)."""
        return np.asarray(self.entity_passages.sum(axis=1)).ravel()

    @cached_property
    def adjacency(self) -> Adjacency:
        t = self.triples
        n_t = len(t)
        src = np.concatenate([t[:, 0], t[:, 2]])
        dst = np.concatenate([t[:, 2], t[:, 0]])
        rel = np.concatenate([t[:, 1], t[:, 1] + self.num_relations])
        tid = np.concatenate([np.arange(n_t), np.arange(n_t)])
        order = np.argsort(src, kind="stable")
        indptr = np.zeros(self.num_entities + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=self.num_entities), out=indptr[1:])
        return Adjacency(indptr, dst[order], rel[order], tid[order])

    def relation_name(self, edge_type: int) -> str:
        """Name of an edge type of :attr:`adjacency` (``inverse_<r>`` for reversed edges)."""
        if edge_type < self.num_relations:
            return self.relations[edge_type]
        return INVERSE_PREFIX + self.relations[edge_type - self.num_relations]

    def seeds(self, question_id: str) -> list[int]:
        """Entity ids linked to a question, de-duplicated, in link order."""
        return list(dict.fromkeys(link.entity for link in self.question_links.get(question_id, [])))

    def entities_of_passages(self, passage_ids: list[str]) -> list[int]:
        """Entities mentioned in the given passages (e.g. the supporting entities of a question)."""
        rows = [self.passage_position[p] for p in passage_ids if p in self.passage_position]
        if not rows:
            return []
        return sorted(set(self.passage_entities[rows].indices.tolist()))
