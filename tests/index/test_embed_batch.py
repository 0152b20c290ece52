"""The Embedder's batch size: the one given, else one chosen for the model's device."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from glmrag.index import embed
from glmrag.index.embed import ACCELERATOR_BATCH, CPU_BATCH, Embedder


class FakeModel:
    """A stand-in sentence-transformers model on ``device``; records the batch size of every encode call."""

    def __init__(self, device: str) -> None:
        self.device = SimpleNamespace(type=device)
        self.batch_sizes: list[int] = []

    def get_sentence_embedding_dimension(self) -> int:
        return 2

    def encode(self, texts, batch_size, **kwargs):
        self.batch_sizes.append(batch_size)
        return np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (len(texts), 1))


@pytest.mark.parametrize(
    ("device", "given", "expected"),
    [("cpu", None, CPU_BATCH), ("cuda", None, ACCELERATOR_BATCH), ("cpu", 7, 7), ("cuda", 7, 7)],
)
def test_batch_size_follows_the_device_unless_given(monkeypatch, device, given, expected):
    model = FakeModel(device)
    monkeypatch.setattr(embed, "_load", lambda path, dev: model)
    monkeypatch.setattr(embed, "resolve_model_path", lambda name: name)
    embedder = Embedder("fake", batch_size=given)
    out = embedder.encode(["a", "b", "a"])
    assert out.shape == (3, 2) and embedder.batch_size == expected and model.batch_sizes == [expected]
    assert CPU_BATCH < ACCELERATOR_BATCH
