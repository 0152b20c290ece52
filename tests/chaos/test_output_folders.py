"""Output folders of a run's own, files written once and never replaced, write errors that name their path,
output locations checked before any work."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import glmrag.io
from glmrag.eval.outputs import RANKINGS_FILE, OutputDirTaken, RankingLog
from glmrag.index.ranking import Ranking
from glmrag.io import DiskFullError, atomic_write_stream, atomic_write_text
from glmrag.jobs.evaluate import run_eval
from glmrag.models.checkpointing import AtomicCheckpointIO
from tests.chaos.conftest import compose_config

pytestmark = pytest.mark.chaos

ROOT = Path(__file__).resolve().parents[2]


def eval_config(tmp: Path, tiny: str, *overrides: str):
    base = ["data=musique100", f"data.name={tiny}", "data.split=null", "n_boot=50", f"output_dir={tmp / 'out'}"]
    return compose_config("eval", [*base, f"results_dir={tmp / 'r'}", *overrides])


def test_a_rerun_into_a_used_output_dir_is_refused_before_any_work(tmp_path, monkeypatch, glmrag_cache, tiny_musique):
    """Probe 8: a rerun into the same output_dir replaced run A's files; now each run has a folder of its own
    and the second is refused, naming what is there, before it reads any data."""
    run_eval(eval_config(tmp_path, tiny_musique, "retriever=[ppr]"))
    out = tmp_path / "out"
    (out / "recall_by_year.png").write_bytes(b"the user's own figure")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"metrics.json", "per_question.jsonl", "results.md", RANKINGS_FILE} < set(before)
    monkeypatch.setattr("glmrag.jobs.evaluate.load_dataset", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(OutputDirTaken, match=r"output_dir=.*metrics\.json"):
        run_eval(eval_config(tmp_path, tiny_musique, "retriever=[dense]"))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize(
    "planted",
    [{".commit.json": {"staging": "../victim"}}, {".outputs.json": {"files": ["../victim/precious.txt"]}}],
)
def test_files_left_in_an_output_dir_never_make_a_run_delete_anything(tmp_path, planted, glmrag_cache, tiny_musique):
    """Probe: a journal or manifest left in an output folder made eval.py remove a folder or a file outside it.
    No file on disk is read as an instruction any more: the folder is refused as taken, nothing is removed."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    for name, content in planted.items():
        (out / name).write_text(json.dumps(content))
    with pytest.raises(OutputDirTaken):
        run_eval(eval_config(tmp_path, tiny_musique, "retriever=[ppr]"))
    assert (victim / "precious.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == sorted(planted)


def test_a_run_that_fails_after_ranking_keeps_its_rankings_in_its_own_folder(
    tmp_path, monkeypatch, glmrag_cache, tiny_musique
):
    monkeypatch.setattr("glmrag.jobs.evaluate.score", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("crash")))
    with pytest.raises(RuntimeError, match="crash"):
        run_eval(eval_config(tmp_path, tiny_musique, "retriever=[dense,ppr]"))
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [RANKINGS_FILE]
    systems = [json.loads(line)["system"] for line in (out / RANKINGS_FILE).read_text().splitlines()]
    assert set(systems) == {"dense", "ppr"}


def test_outputs_never_replace_a_file(tmp_path):
    (tmp_path / "results.md").write_text("mine")
    with pytest.raises(FileExistsError, match="results.md"):
        atomic_write_text(tmp_path / "results.md", "new", replace=False)
    assert (tmp_path / "results.md").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["results.md"]  # no temp file left
    with pytest.raises(FileExistsError):
        RankingLog(tmp_path / "results.md", keep=2)
    assert (tmp_path / "results.md").read_text() == "mine"


def _write_killed_at(path: Path, n: int, data: str) -> bool:
    """Write ``path`` once (no replace) in a child killed (SIGKILL) at its ``n``-th write, fsync, link or
    unlink; whether it was killed before it finished."""
    pid = os.fork()
    if pid == 0:
        calls = [0]

        def killing(real):
            def step(*args, **kwargs):
                calls[0] += 1
                if calls[0] == n:
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(*args, **kwargs)

            return step

        for name in ("link", "unlink", "fsync", "write"):
            setattr(os, name, killing(getattr(os, name)))
        try:
            atomic_write_text(path, data, replace=False)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)


def test_a_kill_at_any_step_of_a_write_leaves_no_file_or_the_whole_file(tmp_path):
    data = "x" * 300_000
    for n in range(1, 50):
        folder = tmp_path / f"kill{n}"
        folder.mkdir()
        killed = _write_killed_at(folder / "metrics.json", n, data)
        final = folder / "metrics.json"
        assert not final.exists() or final.read_text() == data, n
        if not killed:
            assert final.read_text() == data
            break
    assert n > 2


def write_under_file_size_limit(write: str, path: Path, limit: int) -> str:
    """Run the Python statement ``write`` (``path`` as ``sys.argv[1]``) in a process whose files may not grow
    past ``limit`` bytes (a real ``ulimit -f``: the kernel answers EFBIG); returns its stderr, asserting it failed."""
    script = (
        f"import resource, sys\nresource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))\n{write}\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    return done.stderr


def test_a_file_size_limit_names_the_file_and_the_fix(tmp_path):
    """Probe 10: EFBIG at metrics.json was `[Errno 27] File too large` without the path; a real ulimit -f here."""
    path = tmp_path / "metrics.json"
    write = "from glmrag.io import atomic_write_text; atomic_write_text(sys.argv[1], 'x' * 100_000)"
    stderr = write_under_file_size_limit(write, path, 4096)
    assert f"DiskFullError: [Errno 27] {path}: the file is larger than the file-size limit (ulimit -f)" in stderr
    assert "raise the limit (ulimit -f unlimited)" in stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (errno.EDQUOT, "your disk quota there is used up"),
        (errno.ENOSPC, "no space left on its filesystem"),
        (errno.EFBIG, "the file is larger than the file-size limit"),
    ],
)
def test_every_no_room_error_names_the_path(tmp_path, monkeypatch, code, message):
    """Probe 10: EDQUOT was raised without the path, as EFBIG; the rankings log's appends likewise."""

    def no_room(*args):
        raise OSError(code, os.strerror(code))

    with pytest.raises(DiskFullError, match=rf"{tmp_path}/a.json: {message}") as err:
        atomic_write_stream(tmp_path / "a.json", lambda f: no_room())
    assert err.value.errno == code and os.listdir(tmp_path) == []
    log = RankingLog(tmp_path / RANKINGS_FILE, keep=2)
    monkeypatch.setattr(glmrag.io.os, "write", no_room)
    with pytest.raises(DiskFullError, match=rf"{tmp_path}/{RANKINGS_FILE}: {message}"):
        log.append("ppr", [Ranking("q1", ["p1", "p2"], [2.0, 1.0])])


def test_another_write_error_keeps_its_kind_and_gains_the_path(tmp_path):
    def io_error(f):
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match=rf"Errno 5\] Input/output error: '{tmp_path}/a.json'") as err:
        atomic_write_stream(tmp_path / "a.json", io_error)
    assert err.value.errno == errno.EIO and err.value.filename == str(tmp_path / "a.json")


class _FillingFile:
    """A file on a disk that fills after ``room`` bytes: its write raises ENOSPC, as the kernel's would."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def test_a_full_disk_inside_a_checkpoint_write_names_the_checkpoint(tmp_path, monkeypatch):
    """Probe 11: torch's zip writer turned ENOSPC into `RuntimeError ... unexpected pos 13056 vs 12948`."""
    real_fdopen = os.fdopen
    monkeypatch.setattr(glmrag.io.os, "fdopen", lambda fd, mode: _FillingFile(real_fdopen(fd, mode), 4096))
    path = tmp_path / "epoch00.ckpt"
    with pytest.raises(DiskFullError, match=rf"{path}: no space left on its filesystem"):
        AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.zeros(10_000)}}, path)
    assert os.listdir(tmp_path) == []


@pytest.mark.integration  # a python with torch under ulimit -f
def test_a_file_size_limit_inside_a_checkpoint_write_names_the_checkpoint(tmp_path):
    """Probe 11 with a real ulimit -f: the error is DiskFullError naming the checkpoint, nothing is left."""
    path = tmp_path / "last.ckpt"
    write = (
        "import torch; from glmrag.models.checkpointing import AtomicCheckpointIO; "
        "AtomicCheckpointIO().save_checkpoint({'state_dict': {'w': torch.zeros(100_000)}}, sys.argv[1])"
    )
    stderr = write_under_file_size_limit(write, path, 8192)
    assert "unexpected pos" not in stderr.splitlines()[-1]
    assert f"DiskFullError: [Errno 27] {path}: the file is larger than the file-size limit" in stderr
    assert os.listdir(tmp_path) == []


def test_an_unwritable_results_dir_stops_the_evaluation_before_any_work(
    tmp_path, monkeypatch, glmrag_cache, tiny_musique
):
    """Probe 12: results_dir=/dev/full/r failed only after fit, test and evaluation (NotADirectoryError)."""
    monkeypatch.setattr("glmrag.jobs.evaluate.load_dataset", lambda *a, **k: pytest.fail("work started"))
    cfg = eval_config(tmp_path, tiny_musique, "retriever=[ppr]", "results_dir=/dev/full/r")
    with pytest.raises(PermissionError, match=r"results_dir folder /dev/full/r is not writable"):
        run_eval(cfg)


def test_an_unwritable_results_dir_stops_training_before_any_work(tmp_path, monkeypatch):
    from glmrag.jobs.train import run_train

    monkeypatch.setattr("glmrag.jobs.train.register_data", lambda *a: pytest.fail("work started"))
    folders = [f"output_dir={tmp_path / 'o'}", f"checkpoint_dir={tmp_path / 'c'}"]
    cfg = compose_config("train", ["experiment=demo", *folders, "results_dir=/dev/full/r"])
    with pytest.raises(PermissionError, match=r"results_dir folder /dev/full/r is not writable"):
        run_train(cfg)
    assert list(tmp_path.iterdir()) == []  # refused before it made its output or checkpoint folder


@pytest.mark.parametrize("target", ["missing", "loop"])
def test_a_dangling_or_looping_results_dir_link_stops_the_evaluation_before_any_work(
    target, tmp_path, monkeypatch, glmrag_cache, tiny_musique
):
    """Probe (issue 50): a results_dir symlink to nowhere, or to itself, was refused only after every system ran."""
    link = tmp_path / "res"
    link.symlink_to(tmp_path / "missing" if target == "missing" else link)
    monkeypatch.setattr("glmrag.jobs.evaluate.load_dataset", lambda *a, **k: pytest.fail("work started"))
    cfg = eval_config(tmp_path, tiny_musique, "retriever=[ppr]", f"results_dir={link}/adhoc")
    with pytest.raises(NotADirectoryError, match=rf"{link} is a symbolic link to .*, which does not exist or loops"):
        run_eval(cfg)
