"""What a DTKG track hands back: its answer and the KG triples it used, with their scores.

A triple is a row of :attr:`~glmrag.index.kg.KGIndex.triples`; its text, as
embedded, reranked and shown to the LLM, is ``"head relation tail"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glmrag.index.kg import KGIndex


def triple_text(index: KGIndex, row: int) -> str:
    h, r, t = (int(x) for x in index.triples[row])
    return f"{index.entities[h]} {index.relations[r]} {index.entities[t]}"


def relation_label(index: KGIndex, row: int) -> str:
    return index.relations[int(index.triples[row, 1])]


def triples_of(index: KGIndex, entity: int) -> np.ndarray:
    """Rows of the triples with ``entity`` as head or tail (Eqs. 9-11), each once, in row order. Shapes: -> (T_e,)."""
    adj = index.adjacency
    return np.unique(adj.triple[adj.edges_of(entity)])


@dataclass
class TrackResult:
    """The outcome of one question on one track."""

    track: str
    """``parallel`` or ``chain``."""
    answer: str
    """The generated answer (never empty)."""
    triples: dict[int, float] = field(default_factory=dict)
    """Triple row -> score of the triples the answer was built from (verified facts' t*; the paths P*)."""
    trace: dict = field(default_factory=dict)
    """What the track did, for inspection and tests (facts, links, paths, sufficiency checks)."""

    def use(self, row: int, score: float) -> None:
        """Record a used triple, keeping its best score."""
        self.triples[int(row)] = max(float(score), self.triples.get(int(row), float("-inf")))
