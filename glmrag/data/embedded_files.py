"""The datasets shipped inside the package (``glmrag/data/embedded/``).

Each file is a byte-exact copy of a file in the shared data folder, compressed
with xz (``<name>.xz``); ``MANIFEST.json`` records each original's size and
sha256, and ``NOTICE.md`` its source and licence. Importers read the ``.xz``
files directly. Files that other tools must open as plain JSON (the HippoRAG
OpenIE file) are decompressed once into a cache folder by :func:`materialize`:
``$GLMRAG_CACHE_DIR/embedded/`` if that variable is set, else
``~/.cache/glmrag/embedded/``.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
from pathlib import Path

from glmrag.io import atomic_write_bytes, cache_root

EMBEDDED_DIR = Path(__file__).parent / "embedded"

SOURCES: dict[str, str] = {
    "musique_train.json": "musique-hipporag-100/musique_train.json",
    "musique_train_corpus.json": "musique-hipporag-100/musique_train_corpus.json",
    "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json": (
        "musique-hipporag-100/openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"
    ),
    "sample.json": "toy/sample.json",
    "sample_corpus.json": "toy/sample_corpus.json",
    "2wiki_train500_preprocess.original.json": "2wiki-dev-200/2wiki_train500_preprocess.original.json",
}
"""Embedded file name -> its path relative to the shared data folder it was copied from."""


def embedded_path(name: str) -> Path:
    """The compressed embedded copy of ``name`` (one of :data:`SOURCES`)."""
    if name not in SOURCES:
        raise KeyError(f"{name!r} is not an embedded file; the embedded files are {sorted(SOURCES)}")
    return EMBEDDED_DIR / f"{name}.xz"


def manifest() -> dict[str, dict[str, object]]:
    """``MANIFEST.json``: name -> {source, bytes, sha256} of each original file."""
    return json.loads((EMBEDDED_DIR / "MANIFEST.json").read_text(encoding="utf-8"))


def read_embedded_bytes(name: str) -> bytes:
    """The original bytes of embedded file ``name``."""
    return lzma.decompress(embedded_path(name).read_bytes())


def cache_dir() -> Path:
    """Where decompressed embedded files live (see the module docstring)."""
    return cache_root() / "embedded"


def materialize(name: str) -> Path:
    """A plain copy of embedded file ``name`` in :func:`cache_dir`, verified by sha256 when written.

    An existing copy of the right size is reused. The write is atomic (temporary
    file, then rename), so concurrent callers never see a partial file.
    """
    entry = manifest()[name]
    target = cache_dir() / str(entry["sha256"])[:16] / name
    if target.is_file() and target.stat().st_size == entry["bytes"]:
        return target
    data = read_embedded_bytes(name)
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise RuntimeError(f"{embedded_path(name)} does not decompress to the file in MANIFEST.json; reinstall glmrag")
    return atomic_write_bytes(target, data)


def build_embedded(source_root: str | os.PathLike[str]) -> None:
    """Maintainer tool: (re)write the ``.xz`` copies and ``MANIFEST.json`` from the shared data folder."""
    entries = {}
    for name, rel in SOURCES.items():
        data = (Path(source_root) / rel).read_bytes()
        embedded_path(name).write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
        entries[name] = {"source": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    text = json.dumps(entries, indent=2) + "\n"
    (EMBEDDED_DIR / "MANIFEST.json").write_text(text, encoding="utf-8")
