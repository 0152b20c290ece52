"""Fixtures of the nn tests: a deterministic stand-in for the sentence encoder and a graph factory."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from glmrag.nn.graph_inputs import GraphInputs, graph_inputs


class HashEncoder:
    """Unit vectors seeded by a hash of each text: same text, same vector; no model to load."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(-1, self.dim)


@pytest.fixture
def hash_encoder() -> HashEncoder:
    return HashEncoder(16)


@pytest.fixture
def make_graph(hash_encoder):
    """Factory: ``make_graph(index, node_features=None) -> GraphInputs`` with 16-d hashed relation features."""

    def make(index, node_features: torch.Tensor | None = None) -> GraphInputs:
        graph = graph_inputs(index, hash_encoder, node_features=False)
        graph.node_features = node_features
        return graph

    return make


@pytest.fixture(autouse=True)
def one_thread():
    """Run these tiny models on one thread: on a shared, loaded CPU, thread hand-offs cost more than the maths."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
