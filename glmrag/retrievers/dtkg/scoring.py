"""DTKG's two-stage hybrid scoring of candidate triples against a query (§3.3.1, Eqs. 6-7) and Table 3's modes.

Stage I (Eq. 6) keeps the top ``N`` candidates by embedding cosine; stage II reranks them and fuses,
``score = alpha * score_rerank + (1 - alpha) * sim_cos`` (Eq. 7). The ``scoring`` modes: ``hybrid`` (Eq. 7),
``cosine`` (stage I only), ``rerank`` (the reranker over every candidate, no stage-I cut) and ``random``
(uniform scores from the question's seeded generator). Candidates cut by stage I are dropped, not scored;
ties keep stage-I order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.index.ranking import top_k_stable
from glmrag.retrievers.dtkg.rerank import Reranker, score_many


@dataclass
class Scored:
    """Candidates kept for one query: positions into the candidate list, best first, and their scores."""

    positions: np.ndarray
    """(K,) int64 positions in the caller's candidate list."""
    scores: np.ndarray
    """(K,) float64 combined scores, non-increasing."""
    cosine: np.ndarray
    """(K,) float64 stage-I cosines of the same candidates."""


def fuse(rerank: np.ndarray, cosine: np.ndarray, alpha: float) -> np.ndarray:
    """Eq. 7: ``alpha * rerank + (1 - alpha) * cosine``. Shapes: (K,), (K,) -> (K,)."""
    return alpha * np.asarray(rerank, dtype=np.float64) + (1.0 - alpha) * np.asarray(cosine, dtype=np.float64)


class TextEmbeddings:
    """Unit embeddings of short texts (queries, triples), each text encoded once per retriever."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Shapes: ``texts`` (N,) -> (N, d) float32 unit rows (an N of 0 gives (0, 0))."""
        new = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if new:
            vectors = np.asarray(self.encoder.encode(new), dtype=np.float32)  # (N_new, d)
            self.cache.update(zip(new, vectors, strict=True))
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts])


class TwoStageScorer:
    """Score candidate texts against queries; see the module docstring for the modes."""

    def __init__(self, embed: TextEmbeddings, reranker: Reranker, candidates: int, alpha: float, scoring: str) -> None:
        self.embed, self.reranker = embed, reranker
        self.candidates, self.alpha, self.scoring = candidates, alpha, scoring

    def cosine(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Eq. 6. Shapes: ``texts`` (C,) -> (C,) float64."""
        if not texts:
            return np.zeros(0)
        vectors = self.embed([query, *texts])  # (1 + C, d)
        return (vectors[1:] @ vectors[0]).astype(np.float64)

    def stage_one(self, cosine: np.ndarray) -> np.ndarray:
        """Positions of the top ``N`` cosines, best first (ties in candidate order). Shapes: (C,) -> (min(N, C),)."""
        positions, _ = top_k_stable(cosine[None, :], self.candidates)
        return positions[0]

    def score_many(
        self, queries: Sequence[str], candidates: Sequence[list[str]], rng: np.random.Generator
    ) -> list[Scored]:
        """One :class:`Scored` per query; the reranker is called once for all queries (when it can batch)."""
        cosines = [self.cosine(q, c) for q, c in zip(queries, candidates, strict=True)]
        if self.scoring == "random":
            return [self._sorted(np.arange(len(c)), rng.random(len(c)), c) for c in cosines]
        if self.scoring == "rerank":
            kept = [np.arange(len(c)) for c in cosines]
        else:
            kept = [self.stage_one(c) for c in cosines]
        if self.scoring == "cosine":
            return [self._sorted(k, c[k], c) for k, c in zip(kept, cosines, strict=True)]
        texts = [[cands[i] for i in k] for k, cands in zip(kept, candidates, strict=True)]
        reranked = score_many(self.reranker, queries, texts)
        out = []
        for k, c, rr in zip(kept, cosines, reranked, strict=True):
            out.append(self._sorted(k, rr if self.scoring == "rerank" else fuse(rr, c[k], self.alpha), c))
        return out

    def score(self, query: str, candidates: list[str], rng: np.random.Generator) -> Scored:
        return self.score_many([query], [candidates], rng)[0]

    @staticmethod
    def _sorted(positions: np.ndarray, scores: np.ndarray, cosine: np.ndarray) -> Scored:
        order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
        positions = np.asarray(positions, dtype=np.int64)[order]
        return Scored(positions, np.asarray(scores, dtype=np.float64)[order], cosine[positions])
