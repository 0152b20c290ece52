"""A tiny hand-made KG index shared by the evaluator tests.

Entities 0..5 = a b c d e f; triples a-b, b-c, c-d (a chain) and e-f (a separate component).
Passages: p0 mentions a, b; p1 c; p2 d; p3 e; p4 f.
Seeds: q_deep, q_near, q_far -> a; q_noseed -> none; q_nogold -> b; q_seedgold -> a, b.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from glmrag.data.types import Question
from glmrag.index.kg import EntityLink, KGIndex

ENTITY_PASSAGE = [(0, 0), (1, 0), (2, 1), (3, 2), (4, 3), (5, 4)]  # (entity, passage)


def make_index(question_links: dict[str, list[int]]) -> KGIndex:
    rows, cols = zip(*ENTITY_PASSAGE, strict=True)
    entity_passages = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(6, 5))
    # Entity embeddings on the unit circle at known angles, so cosines are exact.
    angles = np.deg2rad([0, 60, 90, 180, 0, 0])
    embeddings = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)  # (6, 2)
    return KGIndex(
        entities=["a", "b", "c", "d", "e", "f"],
        relations=["r", "equivalent"],
        triples=np.array([[0, 0, 1], [1, 0, 2], [2, 0, 3], [4, 0, 5]]),
        passage_ids=["p0", "p1", "p2", "p3", "p4"],
        entity_passages=entity_passages,
        entity_embeddings=embeddings,
        question_links={q: [EntityLink(f"m{e}", e, 1.0) for e in ents] for q, ents in question_links.items()},
    )


@pytest.fixture
def index_factory():
    """:func:`make_index` as a fixture: test modules must not import ``conftest`` (ambiguous across folders)."""
    return make_index


@pytest.fixture
def index() -> KGIndex:
    return make_index(
        {"q_deep": [0], "q_near": [0], "q_far": [0], "q_noseed": [], "q_nogold": [1], "q_seedgold": [0, 1]}
    )


@pytest.fixture
def questions() -> list[Question]:
    return [
        Question("q_deep", "what is d?", ("d",), ("p1", "p2"), hops=2),  # gold entities c (2), d (3): depth 3
        Question("q_near", "what is b?", ("b",), ("p0",), hops=1),  # a (0), b (1): depth 1
        Question("q_far", "what is e?", ("e",), ("p3",), hops=1),  # e not connected to a: unreachable
        Question("q_noseed", "what?", ("a",), ("p0",)),  # no seeds: unreachable, hops unknown
        Question("q_nogold", "no gold", ("x",), (), hops=2),  # excluded from retrieval metrics
        Question("q_seedgold", "a and b", ("The Beatles", "Fab Four"), ("p0",), hops=1),  # gold = seeds: depth 0
    ]
