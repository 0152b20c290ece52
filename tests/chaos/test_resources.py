"""A full disk and a stopped index builder (issue 22, probes 65-69): checked before the work, nothing half
written, what was computed kept, the path or the holder named."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

import pytest

import glmrag.io
from glmrag.eval.outputs import RANKINGS_FILE
from glmrag.index import store
from glmrag.io import DiskFullError, LockTimeout
from glmrag.jobs.evaluate import run_eval
from tests.chaos.conftest import compose_config

pytestmark = pytest.mark.chaos

ROOT = Path(__file__).resolve().parents[2]
Usage = namedtuple("Usage", "total used free")


def eval_config(tmp: Path, tiny: str, *overrides: str):
    base = [
        "data=musique100",
        f"data.name={tiny}",
        "data.split=null",
        "retriever=[dense,ppr]",
        "n_boot=50",
        f"output_dir={tmp / 'out'}",
    ]
    return compose_config("eval", [*base, f"results_dir={tmp / 'r'}", *overrides])


def test_a_full_output_disk_is_refused_before_any_work(tmp_path, monkeypatch, glmrag_cache, tiny_musique):
    monkeypatch.setattr(glmrag.io.shutil, "disk_usage", lambda path: Usage(1 << 30, 1 << 30, 1 << 20))
    monkeypatch.setattr("glmrag.jobs.evaluate.load_dataset", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(DiskFullError, match=r"has 1.0 MiB free, less than the 64 MiB"):
        run_eval(eval_config(tmp_path, tiny_musique))


def test_a_disk_that_fills_at_the_end_keeps_the_rankings_and_the_table(
    tmp_path, monkeypatch, capsys, glmrag_cache, tiny_musique
):
    real_fsync = os.fsync

    def full_at_metrics(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1].startswith(".metrics.json."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(glmrag.io.os, "fsync", full_at_metrics)
    with pytest.raises(DiskFullError, match=r"out/metrics.json: no space left on its filesystem"):
        run_eval(eval_config(tmp_path, tiny_musique))
    out = tmp_path / "out"
    rows = [json.loads(line) for line in (out / RANKINGS_FILE).read_text().splitlines()]
    assert {(r["system"], len(r["passage_ids"])) for r in rows} == {("dense", 10), ("ppr", 10)} and len(rows) == 32
    assert "| dense" in capsys.readouterr().out  # the table was printed before the write failed
    assert sorted(p.name for p in out.iterdir()) == [RANKINGS_FILE]  # no half-written file, no temp file


def test_a_full_cache_disk_names_the_index_folder(tmp_path, monkeypatch, toy_inputs):
    corpus, questions, extractor, settings = toy_inputs

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(glmrag.io, "_write_synced", full)
    folder = tmp_path / "cache" / "toy-idx"
    with pytest.raises(DiskFullError, match=r"toy-idx: no space left on its filesystem"):
        store.load_or_build(folder, corpus, questions, extractor, None, settings)
    assert not folder.exists() and not list(folder.parent.glob(".toy-idx.tmp-*"))


HOLDER = """
import sys, time
from glmrag.io import file_lock
with file_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_stopped_index_builder_is_waited_for_a_bounded_time(tmp_path, toy_inputs):
    corpus, questions, extractor, settings = toy_inputs
    folder = tmp_path / "idx"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / ".idx.lock")], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        os.kill(holder.pid, signal.SIGSTOP)  # Ctrl+Z while it holds the lock
        start = time.monotonic()
        with pytest.raises(LockTimeout, match="index.lock_timeout"):
            store.load_or_build(folder, corpus, questions, extractor, None, settings, lock_timeout=2)
        assert time.monotonic() - start < 10
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()


def test_the_index_lock_timeout_is_a_setting():
    cfg = compose_config("eval", ["data=musique100"])
    assert cfg.index.lock_timeout == 3600
