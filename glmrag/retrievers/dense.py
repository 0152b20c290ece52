"""Dense passage retrieval: cosine similarity of sentence embeddings (the vanilla RAG baseline).

Passages are embedded as ``"title\\ntext"``, questions as their text, both with
the same :class:`~glmrag.index.embed.Embedder` (unit rows, so the dot product is
the cosine). The passage matrix is kept per corpus (keyed by model and
:meth:`Corpus.content_hash`) in memory and, when ``cache_dir`` is given, in a
``.npy`` file there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from glmrag.data.types import Corpus, Question
from glmrag.index.embed import DEFAULT_MODEL, Embedder, passage_matrix
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, top_k_stable
from glmrag.retrievers.base import Ranking

log = logging.getLogger(__name__)

QUESTION_CHUNK = 1024
"""Questions scored at a time, bounding the (questions x passages) score matrix."""


class DenseRetriever:
    """Rank passages by cosine similarity between question and passage embeddings."""

    name = "dense"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        batch_size: int = 256,
        cache_dir: str | Path | None = None,
        device: str | None = None,
    ) -> None:
        self.embedder = Embedder(model, batch_size=batch_size, device=device)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._passages: dict[str, np.ndarray] = {}

    def passage_matrix(self, corpus: Corpus) -> np.ndarray:
        """Embeddings of the corpus's passages in corpus order, computed once per corpus and model.

        Shapes: -> (P, d) float32 with unit rows.
        """
        key = corpus.content_hash()
        if key not in self._passages:
            self._passages[key] = passage_matrix(
                corpus, self.embedder, self.cache_dir, "dense retriever: passage embedding"
            )
        return self._passages[key]

    def retrieve(
        self, questions: Sequence[Question], index: KGIndex | None, corpus: Corpus, top_k: int = 10
    ) -> list[Ranking]:
        """The ``top_k`` passages of ``corpus`` by cosine similarity, best first; ties in corpus order.

        ``index`` is not used (dense retrieval needs no graph).
        """
        passages = self.passage_matrix(corpus)  # (P, d)
        rankings: list[Ranking] = []
        for start in range(0, len(questions), QUESTION_CHUNK):
            batch = questions[start : start + QUESTION_CHUNK]
            queries = self.embedder.encode([q.question for q in batch])  # (B, d)
            positions, scores = top_k_stable(queries @ passages.T, top_k)  # (B, P) -> (B, k)
            rankings += make_rankings([q.id for q in batch], corpus.ids, positions, scores)
        return rankings
