"""From entity scores to a passage ranking (the document rankers of GFM-RAG).

GLM-RAG adopts GFM-RAG's document ranking (GLM-RAG §4.3: the most relevant entities are mapped back to
their documents) with 20 entities (:data:`DOC_RANKER_ENTITIES`, GLM-RAG Table 14). The rankers of
:data:`RANKERS` follow GFM-RAG's ``gfmrag/doc_rankers.py``; ``idf_topk`` (its ``IDFWeightedTopKRanker``)
is the default. Ties are broken deterministically: the lower entity id among equal entity scores, the
earlier corpus position among equal passage scores. An entity scored ``-inf`` is never selected and
contributes 0 (a mask for entities a retriever did not score); scores must not be NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from glmrag.index.kg import KGIndex


@dataclass
class Ranking:
    """Ranked passages (best first) for one question, and optionally ranked entities."""

    question_id: str
    passage_ids: list[str]
    passage_scores: list[float]
    entity_ids: list[int] | None = None
    entity_scores: list[float] | None = None

    def __post_init__(self) -> None:
        if len(self.passage_ids) != len(self.passage_scores):
            raise ValueError(
                f"question {self.question_id}: {len(self.passage_ids)} passages but {len(self.passage_scores)} scores"
            )


RANKERS = ("idf_topk", "idf_topk_scored", "topk", "simple", "softmax_sum")
"""Passage rankers, each GFM-RAG's (Luo et al., 2025) unless said otherwise:

``idf_topk`` (``IDFWeightedTopKRanker``)
    The top ``top_entities`` entities each give weight ``1 / |passages mentioning it|`` (0 for an entity
    in no passage); a passage scores the sum of the weights of the selected entities it mentions. The
    entity scores only choose the entities: GFM-RAG scatters the IDF weight, not score x IDF.
``idf_topk_scored``
    As ``idf_topk`` but each entity contributes ``score / |passages|``; not in GFM-RAG, kept for comparison.
``topk`` (``TopKRanker``)
    The number of selected top entities the passage mentions.
``simple`` (``SimpleRanker``; HippoRAG's node-to-passage step)
    The sum of all entity scores over the passage's entities (E x P matmul).
``softmax_sum`` (glmrag's, not in GFM-RAG)
    ``simple`` over ``softmax(scores)``: the scores read as logits of a distribution over the entities. A
    retriever whose logits are a PPR prior's log-probabilities (:mod:`glmrag.nn.prior`) ranks as PPR does.
"""
DOC_RANKER_ENTITIES = 20
"""GLM-RAG Table 14, "Doc ranker entities: 20" (GFM-RAG's ``IDFWeightedTopKRanker`` config ``top_k: 20``)."""


def top_k_stable(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest entries of each row, best first; equal values in column order.

    Shapes: ``scores`` (B, N) -> positions (B, min(k, N)) int64, values (B, min(k, N)).
    """
    scores = np.atleast_2d(scores)
    n = scores.shape[1]
    k = max(0, min(k, n))
    if k == 0 or k == n:
        positions = np.broadcast_to(np.arange(k), (len(scores), k)).copy()
    else:
        positions = np.argpartition(-scores, k - 1, axis=1)[:, :k]  # (B, k) a top-k set per row
        kth = np.take_along_axis(scores, positions, axis=1).min(axis=1, keepdims=True)  # (B, 1)
        # argpartition is arbitrary among ties at the k-th value: redo rows where it had a choice
        for b in np.flatnonzero((scores >= kth).sum(axis=1) > k):
            row = scores[b]
            above = np.flatnonzero(row > kth[b])
            positions[b] = np.concatenate([above, np.flatnonzero(row == kth[b])[: k - above.size]])
    positions = np.sort(positions, axis=1)  # column order first, so the stable sort keeps it among ties
    order = np.argsort(-np.take_along_axis(scores, positions, axis=1), axis=1, kind="stable")
    positions = np.take_along_axis(positions, order, axis=1)
    return positions, np.take_along_axis(scores, positions, axis=1)


def idf_weights(index: KGIndex) -> np.ndarray:
    """(E,) ``1 / |passages mentioning e|``, and 0 for entities in no passage (as GFM-RAG)."""
    count = index.entity_passage_count
    return np.divide(1.0, count, out=np.zeros(len(count)), where=count > 0)


def passage_scores(
    entity_scores: np.ndarray, index: KGIndex, method: str = "idf_topk", top_entities: int = DOC_RANKER_ENTITIES
) -> np.ndarray:
    """Score every passage from entity scores with the ranker ``method`` (see the module docstring).

    Shapes: ``entity_scores`` (B, E) or (E,) -> (B, P) or (P,), float64 (``simple``, ``softmax_sum``: the
    input's float type).
    """
    if method not in RANKERS:
        raise ValueError(f"unknown passage ranker {method!r}; choose one of {RANKERS}")
    scores = np.asarray(entity_scores)
    if not np.issubdtype(scores.dtype, np.floating):
        scores = scores.astype(np.float64)
    single = scores.ndim == 1
    scores = np.atleast_2d(scores)  # (B, E)
    if scores.shape[1] != index.num_entities:
        raise ValueError(f"entity scores have {scores.shape[1]} columns, the index has {index.num_entities} entities")
    if method == "softmax_sum":
        top = scores.max(axis=1, keepdims=True)  # (B, 1)
        scores = np.exp(scores - np.where(np.isfinite(top), top, 0.0))  # (B, E); -inf -> 0
        total = scores.sum(axis=1, keepdims=True)
        scores = np.divide(scores, total, out=np.zeros_like(scores), where=total > 0)  # a row of -inf scores 0
        method = "simple"
    if method == "simple":
        if np.isneginf(scores).any():
            scores = np.where(np.isneginf(scores), 0.0, scores)
        out = np.asarray(index.passage_entities @ scores.T).T  # (P, E) @ (E, B) -> (B, P)
    else:
        chosen, values = top_k_stable(scores, top_entities)  # (B, K)
        keep = ~np.isneginf(values)
        if method == "topk":
            weight = np.ones_like(values)
        elif method == "idf_topk":
            weight = idf_weights(index)[chosen]
        else:
            weight = values * idf_weights(index)[chosen]
        rows = np.repeat(np.arange(len(scores)), chosen.shape[1]).reshape(chosen.shape)
        selected = sp.csr_matrix(
            (weight[keep], (rows[keep], chosen[keep])), shape=scores.shape
        )  # (B, E) sparse, K entries a row
        out = (selected @ index.entity_passages).toarray()  # (B, P)
    return out[0] if single else out


def rank_passages(
    entity_scores: np.ndarray,
    index: KGIndex,
    top_k_passages: int = 10,
    method: str = "idf_topk",
    top_entities: int = DOC_RANKER_ENTITIES,
    fused: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The best ``top_k_passages`` passages per row: corpus positions and scores, best first.

    ``fused``, when given, are the passage scores themselves (a prior's fused passage logits,
    :func:`glmrag.nn.prior.passage_logits`), which then rank the passages instead of ``method``.

    Shapes: ``entity_scores`` (B, E), ``fused`` (B, P) -> positions (B, k) int64, scores (B, k);
    k = min(top_k_passages, P).
    """
    if fused is not None:
        return top_k_stable(np.atleast_2d(fused), top_k_passages)
    return top_k_stable(np.atleast_2d(passage_scores(entity_scores, index, method, top_entities)), top_k_passages)


def make_rankings(
    question_ids: Sequence[str],
    passage_ids: Sequence[str],
    positions: np.ndarray,
    scores: np.ndarray,
    entity_positions: np.ndarray | None = None,
    entity_scores: np.ndarray | None = None,
) -> list[Ranking]:
    """One :class:`Ranking` per question from row-aligned top-k arrays.

    Shapes: ``positions``, ``scores`` (B, k); ``entity_positions``, ``entity_scores`` (B, m) or None.
    """
    rankings = []
    for b, qid in enumerate(question_ids):
        rankings.append(
            Ranking(
                question_id=qid,
                passage_ids=[passage_ids[i] for i in positions[b]],
                passage_scores=scores[b].astype(float).tolist(),
                entity_ids=None if entity_positions is None else entity_positions[b].tolist(),
                entity_scores=None if entity_scores is None else entity_scores[b].astype(float).tolist(),
            )
        )
    return rankings
