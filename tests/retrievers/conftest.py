"""Fixtures of the retriever tests."""

import hashlib

import numpy as np
import pytest


class HashEncoder:
    """Unit vectors seeded by a hash of each text: equal texts have cosine 1, others about 0; no model to load."""

    def encode(self, texts):
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(8)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(-1, 8)


@pytest.fixture
def hash_encoder() -> HashEncoder:
    return HashEncoder()
