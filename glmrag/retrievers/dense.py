"""Dense passage retrieval: cosine similarity of sentence embeddings (the vanilla RAG baseline).

Passages are embedded as ``"title\\ntext"``, questions as their text, both with
the same :class:`~glmrag.index.embed.Embedder` (unit rows, so the dot product is
the cosine). The passage matrix is kept per corpus (keyed by model and
:meth:`Corpus.content_hash`) in memory and, when ``cache_dir`` is given, in a
``.npy`` file there.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.embed import DEFAULT_MODEL, Embedder
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, top_k_stable
from glmrag.io import load_cached_array, write_cache_array
from glmrag.retrievers.base import Ranking

log = logging.getLogger(__name__)

QUESTION_CHUNK = 1024
"""Questions scored at a time, bounding the (questions x passages) score matrix."""


def passage_text(passage: Passage) -> str:
    """The text a passage is embedded as: its title, a newline, its text."""
    return f"{passage.title}\n{passage.text}"


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

    def _key(self, corpus: Corpus) -> str:
        model = hashlib.sha256(self.embedder.model_name.encode()).hexdigest()[:8]
        return f"{model}-{corpus.content_hash()}"

    def passage_matrix(self, corpus: Corpus) -> np.ndarray:
        """Embeddings of the corpus's passages in corpus order, computed once per corpus and model.

        Shapes: -> (P, d) float32 with unit rows.
        """
        key = self._key(corpus)
        if key in self._passages:
            return self._passages[key]
        path = self.cache_dir / f"dense-{key}.cache" if self.cache_dir is not None else None
        matrix = load_cached_array(path) if path is not None else None  # None when missing or not intact
        if matrix is not None:
            if matrix.ndim != 2 or matrix.shape[0] != len(corpus):
                log.warning("%s holds %d rows for %d passages; re-embedding", path, matrix.shape[0], len(corpus))
                matrix = None
        if matrix is None:
            texts = [passage_text(p) for p in corpus]
            matrix = self.embedder.encode(texts, stage="dense retriever: passage embedding", unit="passage")
            if path is not None:
                write_cache_array(path, matrix)
        self._passages[key] = matrix
        return matrix

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
