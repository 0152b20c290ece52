"""Caches: a truncated or edited cache file is rebuilt with a warning, never loaded, never a crash;
index builds are serialised by a lock, killed builds' temp folders are removed, and a read-only cache
folder fails before the build."""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np
import pytest

from glmrag.data.types import Corpus, Passage
from glmrag.index.store import load_or_build, save_index
from glmrag.io import CacheError, read_cache_array, write_cache_array
from glmrag.retrievers.dense import DenseRetriever

pytestmark = pytest.mark.chaos


def test_cache_array_round_trip_and_truncation_is_named(tmp_path):
    path = write_cache_array(tmp_path / "a.cache", np.arange(12, dtype=np.float32).reshape(3, 4))
    assert np.array_equal(read_cache_array(path), np.arange(12, dtype=np.float32).reshape(3, 4))
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(CacheError, match=r"a.cache: checksum mismatch"):
        read_cache_array(path)


def test_truncated_dense_cache_is_rebuilt_not_a_crash(tmp_path):
    corpus = Corpus([Passage("p0", "Paris", "Paris is in France."), Passage("p1", "Rome", "Rome is in Italy.")])
    dense = DenseRetriever("offline:all-MiniLM-L6-v2", cache_dir=tmp_path)
    first = dense.passage_matrix(corpus)
    (cached,) = tmp_path.glob("dense-*")
    cached.write_bytes(cached.read_bytes()[: len(cached.read_bytes()) // 2])  # a killed writer's half file
    again = DenseRetriever("offline:all-MiniLM-L6-v2", cache_dir=tmp_path).passage_matrix(corpus)
    assert np.allclose(first, again)
    assert read_cache_array(cached).shape == first.shape  # rewritten whole


def _build_in_child(folder, corpus, qa, extractor, settings, log_path):
    import glmrag.index.store as store

    real = store.build_index

    def counted(*args, **kwargs):
        with open(log_path, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    store.build_index = counted
    load_or_build(folder, corpus, qa, extractor, None, settings)


def test_two_concurrent_runs_build_the_index_once(tmp_path, toy_inputs):
    corpus, qa, extractor, settings = toy_inputs
    folder, log_path = tmp_path / "idx", tmp_path / "builds.log"
    ctx = multiprocessing.get_context("fork")
    args = (folder, corpus, qa, extractor, settings, log_path)
    procs = [ctx.Process(target=_build_in_child, args=args) for _ in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(log_path.read_text().split()) == 1  # the second run waited and loaded the first one's build


def test_stale_temp_folders_are_removed_by_the_next_build(tmp_path, toy_inputs):
    corpus, qa, extractor, settings = toy_inputs
    folder = tmp_path / "idx"
    stale = tmp_path / ".idx.tmp-killed"
    stale.mkdir()
    (stale / "triples.npy").write_bytes(b"half")
    load_or_build(folder, corpus, qa, extractor, None, settings)
    assert not stale.exists() and (folder / "manifest.json").is_file()


def test_unwritable_cache_fails_before_building(tmp_path, toy_inputs, monkeypatch):
    corpus, qa, extractor, settings = toy_inputs
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o555)
    if os.access(root, os.W_OK):  # root ignores the mode: a folder below a plain file is unwritable for anyone
        root = tmp_path / "a-file"
        root.write_text("")
    import glmrag.index.store as store

    monkeypatch.setattr(store, "build_index", lambda *a, **k: pytest.fail("built although it could not be saved"))
    with pytest.raises(PermissionError, match="index cache folder .* is not writable"):
        load_or_build(root / "idx", corpus, qa, extractor, None, settings)


@pytest.mark.integration  # 300 loads against a rewriting process
def test_readers_never_see_a_half_replaced_index(tmp_path, toy_inputs):
    """A writer replaces the index over and over while this process loads it: every load succeeds."""
    corpus, qa, extractor, settings = toy_inputs
    folder = tmp_path / "idx"
    index = load_or_build(folder, corpus, qa, extractor, None, settings)
    ctx = multiprocessing.get_context("fork")
    stop, saves = ctx.Event(), ctx.Value("i", 0)

    def rewrite():
        from glmrag.io import file_lock

        while not stop.is_set():
            with file_lock(folder.parent / ".idx.lock"):
                save_index(index, folder)
            with saves.get_lock():
                saves.value += 1
            time.sleep(0.05)  # a gap between rewrites, as between real builds: the readers get their turn

    writer = ctx.Process(target=rewrite)
    writer.start()
    loads, deadline = 0, time.monotonic() + 60
    try:
        while (loads < 300 or saves.value < 30) and time.monotonic() < deadline and writer.is_alive():
            load_or_build(folder, corpus, qa, extractor, None, settings, rebuild=False)
            loads += 1
    finally:
        stop.set()
        writer.join(30)
    assert writer.exitcode == 0, "the writer process failed, so the loads ran against no writer"
    assert saves.value >= 30, f"the writer replaced the index only {saves.value} times during {loads} loads"
