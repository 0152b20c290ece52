"""The phrase embedding cache and the de-duplicating Embedder."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from glmrag.index.embed import Embedder
from glmrag.index.embed_cache import PhraseEmbeddingCache, model_key


class CountingEmbed:
    """A stand-in model: a fixed unit vector per text (from its hash); records every text it embeds."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.seen.extend(texts)
        seeds = [int(hashlib.md5(t.encode()).hexdigest()[:8], 16) for t in texts]
        rows = [np.random.default_rng(seed).standard_normal(8) for seed in seeds]
        out = np.stack(rows).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_cache_embeds_each_phrase_once_and_reads_it_back_from_disk(tmp_path):
    embed = CountingEmbed()
    texts = ["paris", "lyon", "paris", "é café\nnewline", "lyon"]
    first = PhraseEmbeddingCache(tmp_path).encode(texts, embed)
    assert embed.seen == ["paris", "lyon", "é café\nnewline"]  # distinct, first-occurrence order
    np.testing.assert_array_equal(first, CountingEmbed()(texts))
    again = PhraseEmbeddingCache(tmp_path)  # a new process: only the files
    np.testing.assert_array_equal(again.encode(texts[::-1], embed), first[::-1])
    assert len(embed.seen) == 3 and len(again) == 3
    again.encode(["paris", "nice"], embed)
    assert embed.seen[3:] == ["nice"] and len(list(tmp_path.glob("*.npz"))) == 2


def test_a_corrupt_shard_is_skipped_and_its_phrases_embedded_again(tmp_path, caplog):
    embed = CountingEmbed()
    PhraseEmbeddingCache(tmp_path).encode(["paris", "lyon"], embed)
    (shard,) = tmp_path.glob("*.npz")
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF
    shard.write_bytes(bytes(data))
    out = PhraseEmbeddingCache(tmp_path).encode(["paris"], embed)
    assert "checksum" in caplog.text and embed.seen[2:] == ["paris"]
    np.testing.assert_array_equal(out, CountingEmbed()(["paris"]))


def test_model_key_follows_the_model_files(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"12345")
    key = model_key("offline:all-MiniLM-L6-v2", str(tmp_path))
    assert key.startswith("offline_all-MiniLM-L6-v2-")
    (tmp_path / "model.bin").write_bytes(b"123456")
    assert model_key("offline:all-MiniLM-L6-v2", str(tmp_path)) != key
    assert model_key("other", str(tmp_path)) != model_key("offline:all-MiniLM-L6-v2", str(tmp_path))


@pytest.mark.parametrize("cached", [False, True])
def test_embedder_deduplicates_and_equals_the_model_on_each_text(tmp_path, cached):
    texts = ["barack obama", "honolulu", "barack obama", "hawaii", "honolulu"]
    embedder = Embedder(cache_dir=tmp_path if cached else None)
    calls = []
    original = embedder._encode_distinct
    embedder._encode_distinct = lambda batch: calls.append(list(batch)) or original(batch)
    out = embedder.encode(texts)
    assert calls == [["barack obama", "honolulu", "hawaii"]]
    alone = np.stack([Embedder().model.encode([t], normalize_embeddings=True)[0] for t in texts])
    np.testing.assert_allclose(out, alone, atol=1e-5)
    if cached:
        np.testing.assert_array_equal(Embedder(cache_dir=tmp_path).encode(texts), out)


def test_spacy_processes_follow_the_corpus_and_the_cores(monkeypatch):
    import os

    from glmrag.index import cache

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    counts = [cache.spacy_processes_for(n) for n in (0, 999, 1000, 2500, 6119, 100_000)]
    assert counts == [1, 1, 1, 2, 4, 4]


def test_length_sorted_chunks_come_back_in_input_order(embedder, monkeypatch):
    monkeypatch.setattr("glmrag.index.embed.CHUNK_BATCHES", 1)  # chunks of two texts: the order crosses chunks
    small = Embedder(embedder.model_name, batch_size=2)
    texts = ["a", "a much longer phrase about the university of stanford", "bc", "thomas sudhof", "rome"]
    alone = np.stack([small.encode([t])[0] for t in texts])
    np.testing.assert_allclose(small.encode(texts), alone, atol=1e-5)
