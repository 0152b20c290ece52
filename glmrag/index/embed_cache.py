"""Phrase embeddings cached on disk, shared by every index build, dataset and rebuild of one model.

Embedding entity phrases and question mentions is the largest stage of a spaCy build
(``benchmarks/RESULTS.md``), and the same phrases return when an index is rebuilt with other settings
or another dataset shares entities, so :class:`PhraseEmbeddingCache` keeps every vector once computed.
Layout: ``<folder>/<model key>/<sha256>.npz``, one shard per call that embedded new phrases, written
atomically and named by the SHA-256 of its bytes; a shard whose bytes do not match its name is skipped
with a warning. The model key (:func:`model_key`) changes when a model is replaced under the same name.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from glmrag.io import atomic_write_bytes

log = logging.getLogger(__name__)


def model_key(name: str, model_path: str | None = None) -> str:
    """A folder name for ``name``: readable slug plus a hash of the name and the model folder's file list."""
    listing = ""
    if model_path is not None and Path(model_path).is_dir():
        root = Path(model_path)
        files = sorted(p for p in root.rglob("*") if p.is_file())
        listing = "\n".join(f"{p.relative_to(root)}\t{p.stat().st_size}" for p in files)
    digest = hashlib.sha256(f"{name}\n{listing}".encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[-60:]
    return f"{slug}-{digest}"


def _pack(texts: Sequence[str], vectors: np.ndarray) -> bytes:
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.cumsum([0, *(len(b) for b in encoded)]).astype(np.int64)
    buffer = io.BytesIO()
    text_bytes = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    np.savez(buffer, text_bytes=text_bytes, offsets=offsets, vectors=vectors.astype(np.float32))
    return buffer.getvalue()


def _unpack(data: bytes) -> tuple[list[str], np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        raw, offsets, vectors = arrays["text_bytes"].tobytes(), arrays["offsets"], arrays["vectors"]
    texts = [raw[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]
    if len(texts) != len(vectors):
        raise ValueError(f"{len(texts)} phrases but {len(vectors)} vectors")
    return texts, vectors


class PhraseEmbeddingCache:
    """Phrase -> unit embedding of one model, read from and appended to ``folder``.

    Args:
        folder: the model's cache folder (``<cache root>/<model_key(...)>``); created on the first write.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._rows: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._rows is None:
            self._rows = {}
            for shard in sorted(self.folder.glob("*.npz")):
                data = shard.read_bytes()
                if hashlib.sha256(data).hexdigest() != shard.stem:
                    log.warning("skipping embedding cache shard %s: its bytes do not match its checksum name", shard)
                    continue
                try:
                    texts, vectors = _unpack(data)
                except (ValueError, KeyError, OSError) as err:
                    log.warning("skipping embedding cache shard %s: %s", shard, err)
                    continue
                self._rows.update(zip(texts, vectors, strict=True))
        return self._rows

    def encode(self, texts: Sequence[str], embed: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """Vectors of ``texts`` (in order): cached ones read, the others embedded once each by ``embed``
        (distinct texts only) and stored in one new shard.

        Shapes: ``texts`` (N,) -> (N, dim) float32.
        """
        rows = self._load()
        missing = list(dict.fromkeys(t for t in texts if t not in rows))
        if missing:
            vectors = np.asarray(embed(missing), dtype=np.float32)
            data = _pack(missing, vectors)
            atomic_write_bytes(self.folder / f"{hashlib.sha256(data).hexdigest()}.npz", data)
            rows.update(zip(missing, vectors, strict=True))
        return np.stack([rows[t] for t in texts]).astype(np.float32, copy=False)

    def dim(self) -> int | None:
        """The size of the cached vectors; None while the cache is empty."""
        rows = self._load()
        return len(next(iter(rows.values()))) if rows else None

    def __len__(self) -> int:
        return len(self._load())
