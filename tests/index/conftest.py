"""Shared fixtures of the index tests."""

from __future__ import annotations

import pytest

from glmrag.index.embed import Embedder


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The offline MiniLM embedder, loaded once (about 5 s) and shared by a test module."""
    emb = Embedder()
    emb.encode(["warm up"])
    return emb
