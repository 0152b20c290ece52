"""The cached GNN inputs: a damaged cache file is detected and rebuilt (with a warning naming it), never used."""

import hashlib
import logging
import pickle

import numpy as np
import pytest
import torch

from glmrag.data.types import Question
from glmrag.datamodules import gnn_input_cache
from glmrag.datamodules.gnn_input_cache import cached_question_embeddings
from glmrag.io import CACHE_MAGIC, CacheError, read_cache_tensors, write_cache_tensors

QUESTIONS = [Question(f"q{i}", f"question number {i}?", answers=("a",), supporting=()) for i in range(3)]


class CountingEmbedder:
    """Stands in for the sentence encoder: a fixed vector per text, and a count of the texts it embedded."""

    calls = 0

    def __init__(self, model: str) -> None:
        self.model = model

    def encode(self, texts):
        CountingEmbedder.calls += len(texts)
        return np.stack([np.full(4, float(len(t)), dtype=np.float32) for t in texts])


@pytest.fixture
def embedder(monkeypatch):
    CountingEmbedder.calls = 0
    monkeypatch.setattr(gnn_input_cache, "Embedder", CountingEmbedder)
    return CountingEmbedder


def expected():
    return {q.id: torch.full((4,), float(len(q.question))) for q in QUESTIONS}


def assert_embeddings(got):
    want = expected()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)


def cache_file(folder):
    (path,) = folder.glob("questions-*")
    return path


def test_second_call_reads_the_cache(tmp_path, embedder):
    assert_embeddings(cached_question_embeddings(QUESTIONS, "m", str(tmp_path)))
    assert_embeddings(cached_question_embeddings(QUESTIONS, "m", str(tmp_path)))
    assert embedder.calls == len(QUESTIONS)  # computed once
    assert read_cache_tensors(cache_file(tmp_path))["ids"] == [q.id for q in QUESTIONS]


def truncate(blob: bytes) -> bytes:
    return blob[: len(blob) - 40]


def flip_a_bit_in_the_tensor(blob: bytes) -> bytes:
    """Flip one bit of the stored float32 bytes (the zip archive still opens: torch does not check CRCs)."""
    stored = np.full(4, float(len(QUESTIONS[1].question)), dtype=np.float32).tobytes()
    at = blob.find(stored)
    assert at > 0, "the tensor's bytes are stored as they are"
    return blob[:at] + bytes([blob[at] ^ 0x01]) + blob[at + 1 :]


def old_format(blob: bytes) -> bytes:
    """A bare ``torch.save`` file, as the cache was written before the checksummed header."""
    return blob[blob.index(b"\n", blob.index(b"\n") + 1) + 1 :]


@pytest.mark.parametrize("damage", [truncate, flip_a_bit_in_the_tensor, old_format])
def test_a_damaged_file_is_rebuilt_with_a_warning_naming_it(tmp_path, embedder, caplog, damage):
    cached_question_embeddings(QUESTIONS, "m", str(tmp_path))
    path = cache_file(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING):
        got = cached_question_embeddings(QUESTIONS, "m", str(tmp_path))
    assert_embeddings(got)  # the damaged values are not used
    assert embedder.calls == 2 * len(QUESTIONS)  # recomputed
    assert str(path) in caplog.text
    assert read_cache_tensors(path)["ids"] == [q.id for q in QUESTIONS]  # and rewritten intact


class Payload:
    """An object a plain pickle would rebuild (and could run code for); a weights-only load refuses it."""


def test_a_file_holding_code_is_refused_even_with_a_valid_checksum(tmp_path):
    path = write_cache_tensors(tmp_path / "x.cache", {"emb": torch.ones(2)})
    assert torch.equal(read_cache_tensors(path)["emb"], torch.ones(2))
    payload = pickle.dumps({"emb": Payload()}, protocol=2)
    path.write_bytes(CACHE_MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    with pytest.raises(CacheError, match="x.cache: unreadable tensors"):
        read_cache_tensors(path)
