"""Embeddings from a model behind an OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, text-embeddings-inference,
OpenAI, :mod:`glmrag.llm.serve`).

An embedding model name ``http:<model>@<base_url>`` (e.g. ``http:BAAI/bge-large-en-v1.5@http://127.0.0.1:8080/v1``)
works wherever a sentence-transformers name does (``index.embed_model``, a dense retriever's or a prior's model):
:class:`glmrag.index.embed.Embedder` hands such names to :class:`ServedEmbeddingModel`.

- Requests carry at most :data:`REQUEST_TEXTS` texts; at most ``concurrency`` are in flight; 429, 5xx,
  timeouts and refused connections are retried with backoff (:class:`~glmrag.llm.endpoint.OpenAIEndpoint`).
- The key is read from ``$GLMRAG_EMBED_API_KEY`` (:data:`API_KEY_ENV`) at each request and never stored.
- Vectors are cached on disk under the model and the endpoint (``<cache root>/served_embeddings/<model key>/``,
  a :class:`~glmrag.index.embed_cache.PhraseEmbeddingCache`), each text once; every call's new vectors are
  written as one checksummed shard only once all of them came back, so a server that fails mid-way leaves the
  shards written before intact and the next run asks only for the rest.
- Rows come back L2-normalised (servers differ in whether they normalise); an answer with another count,
  another dimension than earlier ones, or a zero or non-finite vector is an :class:`EmbeddingServerError`.

Serve a local sentence-transformers model with ``python -m glmrag.index.serve_embeddings --model <name>``.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from glmrag.index.embed_cache import PhraseEmbeddingCache, model_key
from glmrag.io import cache_root
from glmrag.llm.endpoint import EndpointError, OpenAIEndpoint

log = logging.getLogger(__name__)

PREFIX = "http:"
"""Model names starting with this are served: ``http:<model>@<base_url>``."""
API_KEY_ENV = "GLMRAG_EMBED_API_KEY"
"""The environment variable holding the endpoint's key (unset: no key is sent)."""
REQUEST_TEXTS = 32
"""Texts per request: text-embeddings-inference's default ``--max-client-batch-size`` (its router's CLI)."""
_NAME = re.compile(r"^http:(?P<model>.+)@(?P<url>https?://\S+)$")


class EmbeddingServerError(EndpointError):
    """An embedding server did not answer, or answered something that is not the vectors asked for."""


def is_served(name: str) -> bool:
    return name.startswith(PREFIX)


def parse_served(name: str) -> tuple[str, str]:
    """``(model, base_url)`` of ``http:<model>@<base_url>``; a name of another shape is a ``ValueError``."""
    match = _NAME.match(name)
    if match is None:
        raise ValueError(
            f"embedding model {name!r}: a served model is named http:<model>@<base_url>, "
            "e.g. http:BAAI/bge-large-en-v1.5@http://127.0.0.1:8080/v1 (base_url with its version path)"
        )
    return match["model"], match["url"].rstrip("/")


class ServedEmbeddingModel:
    """The embeddings of the served model ``name`` (``http:<model>@<base_url>``), cached under ``cache_dir``
    (None: ``<cache root>/served_embeddings``).

    ``encode`` and ``get_embedding_dimension`` are called as sentence-transformers' are, so
    :class:`~glmrag.index.embed.Embedder` uses both kinds of model the same way.
    """

    def __init__(
        self,
        name: str,
        cache_dir: str | Path | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        concurrency: int = 4,
    ) -> None:
        self.name = name
        self.model, base_url = parse_served(name)
        self.endpoint = OpenAIEndpoint(
            base_url, API_KEY_ENV, timeout, max_retries, backoff, concurrency=concurrency, error=EmbeddingServerError
        )
        root = Path(cache_dir) if cache_dir is not None else cache_root() / "served_embeddings"
        self.cache = PhraseEmbeddingCache(root / model_key(name))
        self._dim: int | None = None

    def close(self) -> None:
        self.endpoint.close()

    def get_embedding_dimension(self) -> int:
        """The vectors' size: that of the cached vectors, else of one request's answer."""
        if self._dim is None:
            self.encode(["dimension"])
        return self._dim

    def encode(self, texts: list[str], **_: object) -> np.ndarray:
        """Unit vectors of ``texts``, from the cache or the server (other keyword arguments are ignored).

        Shapes: ``texts`` (N,) -> (N, d) float32.
        """
        if self._dim is None and (cached := self.cache.dim()) is not None:
            self._dim = cached
        return self.cache.encode(list(texts), self._request_all)

    def _request_all(self, texts: list[str]) -> np.ndarray:
        batches = [texts[i : i + REQUEST_TEXTS] for i in range(0, len(texts), REQUEST_TEXTS)]
        with ThreadPoolExecutor(max_workers=min(self.endpoint.concurrency, len(batches))) as pool:
            parts = list(pool.map(self._request, batches))
        return np.concatenate(parts)  # (N, d)

    def _request(self, texts: list[str]) -> np.ndarray:
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        answer, _ = self.endpoint.post("/embeddings", body)
        url = self.endpoint.base_url + "/embeddings"
        try:
            rows = sorted(answer["data"], key=lambda row: row["index"])
            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float64)  # (n, d)
        except (KeyError, TypeError, ValueError) as err:
            raise EmbeddingServerError(
                f"{url} answered without data[i].embedding lists of numbers ({err!r}); "
                "is it an OpenAI-compatible embeddings server?"
            ) from None
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise EmbeddingServerError(f"{url} answered {len(rows)} vectors for {len(texts)} texts")
        self._check_dimension(vectors.shape[1], url)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)  # (n, 1)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise EmbeddingServerError(f"{url} answered a zero or non-finite vector for one of {texts[:3]!r}...")
        return (vectors / norms).astype(np.float32)

    def _check_dimension(self, dim: int, source: str) -> None:
        if self._dim is None:
            self._dim = dim
        elif dim != self._dim:
            raise EmbeddingServerError(
                f"{source} has {dim}-d vectors where {self.name} gave {self._dim}-d ones: the server now serves "
                f"another model; serve the same model again, or name the new one (the cache {self.cache.folder} "
                "is kept as it was)"
            )
