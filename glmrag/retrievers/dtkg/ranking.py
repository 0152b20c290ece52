"""From the triples a DTKG track used to a passage ranking, so DTKG is measured by Recall@k like the others.

The passages of the used triples come first, each with the best score of the triples that lead to it
(:func:`triple_passages`: those mentioning head and tail, else the head, else the tail); the rest of the
corpus follows in dense order (the ``dense`` baseline's MiniLM cosines and cache). Scores stay monotone: a
used passage scores ``2 + s`` (triple scores are above -1), a dense one its cosine (at most 1).
"""

from __future__ import annotations

import numpy as np

from glmrag.data.types import Corpus
from glmrag.index.kg import KGIndex
from glmrag.retrievers.base import Ranking

USED_OFFSET = 2.0
"""Added to used passages' scores so they stay above every cosine."""


def triple_passages(index: KGIndex, row: int) -> np.ndarray:
    """Passage columns of a triple: mentioning head and tail, else head, else tail. Shapes: -> (P_t,) int."""
    h, _, t = (int(x) for x in index.triples[row])
    ep = index.entity_passages
    head, tail = ep[h].indices, ep[t].indices
    both = np.intersect1d(head, tail)
    return both if both.size else (head if head.size else tail)


def used_passages(index: KGIndex, triples: dict[int, float]) -> dict[str, float]:
    """Passage id -> best score among the used triples that lead to it."""
    out: dict[str, float] = {}
    for row, score in triples.items():
        for col in triple_passages(index, row):
            pid = index.passage_ids[int(col)]
            out[pid] = max(score, out.get(pid, float("-inf")))
    return out


def rank_passages(
    question_id: str,
    used: dict[str, float],
    cosine: np.ndarray,
    corpus: Corpus,
    top_k: int,
) -> Ranking:
    """Used passages (by score, cosine, position), then dense order, ``max(top_k, |used|)`` passages in all.

    Shapes: ``cosine`` (P,) over ``corpus`` in corpus order.
    """
    used = {pid: s for pid, s in used.items() if pid in corpus}
    positions = {pid: corpus.position(pid) for pid in used}
    head = sorted(used, key=lambda pid: (-used[pid], -cosine[positions[pid]], positions[pid]))
    taken = set(head)
    ids = list(head)
    scores = [USED_OFFSET + used[pid] for pid in head]
    for p in np.argsort(-cosine, kind="stable"):
        if len(ids) >= top_k:
            break
        pid = corpus[int(p)].id
        if pid not in taken:
            ids.append(pid)
            scores.append(float(cosine[p]))
    return Ranking(question_id, ids, scores)
