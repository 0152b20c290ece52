"""Stand-ins the tests of several packages share (importable as ``stand_ins``: ``tests/`` is on the path)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


class HashEncoder:
    """Unit vectors seeded by a hash of each text: equal texts have cosine 1, others about 0; no model to load."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Shapes: texts (N,) -> (N, dim) float32, unit rows."""
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(-1, self.dim)
