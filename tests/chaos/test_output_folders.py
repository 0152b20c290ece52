"""Output folders that never mix two runs, write errors that name their path, output locations checked before
any work (issue 37, probes 8-12)."""

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
from glmrag.eval.output_folder import MANIFEST, output_files, staged_outputs
from glmrag.eval.outputs import RANKINGS_FILE, RankingLog
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


def visible_files(folder: Path) -> dict[str, bytes]:
    """The run files a user sees in ``folder`` (hidden files and staging folders aside)."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}


def test_a_rerun_that_fails_after_ranking_leaves_the_previous_run_whole(
    tmp_path, monkeypatch, glmrag_cache, tiny_musique
):
    """Probe 8: the rerun emptied rankings.jsonl at once and left run A's metrics.json and results.md beside it."""
    run_eval(eval_config(tmp_path, tiny_musique, "retriever=[dense,ppr]"))
    out = tmp_path / "out"
    before = visible_files(out)
    assert set(before) == {"metrics.json", "per_question.jsonl", "results.md", RANKINGS_FILE}

    def crash(*args, **kwargs):
        raise RuntimeError("a crash after the ranking")

    monkeypatch.setattr("glmrag.jobs.evaluate.score", crash)
    with pytest.raises(RuntimeError, match="a crash after the ranking"):
        run_eval(eval_config(tmp_path, tiny_musique, "retriever=[ppr]"))
    assert visible_files(out) == before  # run A, whole: its dense rankings too
    (partial,) = out.glob("incomplete-*")  # run B's rankings, kept apart
    assert {json.loads(line)["system"] for line in (partial / RANKINGS_FILE).read_text().splitlines()} == {"ppr"}


def test_a_successful_rerun_replaces_the_whole_set(tmp_path, glmrag_cache, tiny_musique):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text("{}")  # a run of older code, before manifests: its figure goes too
    (out / "recall_by_hops.png").write_bytes(b"a figure of that run")
    (out / "notes.txt").write_text("mine")  # no run wrote it
    run_eval(eval_config(tmp_path, tiny_musique, "retriever=[ppr]"))
    files = visible_files(out)
    assert set(files) == {"metrics.json", "per_question.jsonl", "results.md", RANKINGS_FILE, "notes.txt"}
    assert json.loads(files["metrics.json"])["systems"] == ["ppr"]
    assert json.loads((out / MANIFEST).read_text())["files"] == sorted(set(files) - {"notes.txt"})
    assert not list(out.glob("incomplete-*"))


def _write_set(folder: Path, tag: str, names: list[str]) -> None:
    with staged_outputs(folder) as staging:
        for name in names:
            (staging / name).write_text(f"{tag}:{name}")


RUN_A = ["metrics.json", "per_question.jsonl", "recall_by_hops.png", "results.md"]
RUN_B = ["metrics.json", "per_question.jsonl", "rankings.jsonl", "results.md"]


def _commit_killed_at(folder: Path, n: int) -> bool:
    """Commit run B in a child killed (SIGKILL) at its ``n``-th rename, unlink, rmdir or fsync; whether it
    was killed before it finished."""
    pid = os.fork()
    if pid == 0:  # the child: count the file-system steps, die at the n-th
        calls = [0]

        def killing(real):
            def step(*args, **kwargs):
                calls[0] += 1
                if calls[0] == n:
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(*args, **kwargs)

            return step

        for name in ("replace", "rename", "unlink", "rmdir", "fsync"):
            setattr(os, name, killing(getattr(os, name)))
        code = 1
        try:
            _write_set(folder, "B", RUN_B)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0, f"the child failed at step {n}"
    return os.WIFSIGNALED(status)


def test_a_kill_at_any_step_of_a_commit_leaves_one_run_or_the_other(tmp_path):
    """Probe 9: a SIGKILL just after metrics.json was replaced left metrics.json of run B beside run A's other
    files and a temp file that outlived the next run. Here the child is killed at each step in turn; whatever
    reads the folder next (output_files) sees run A's files or run B's, whole, and no temp file."""
    outcomes = set()
    for n in range(1, 200):
        folder = tmp_path / f"kill{n}"
        _write_set(folder, "A", RUN_A)
        killed = _commit_killed_at(folder, n)
        files = {p.name: p.read_text() for p in output_files(folder)}
        assert files in ({k: f"A:{k}" for k in RUN_A}, {k: f"B:{k}" for k in RUN_B}), (n, files)
        assert set(visible_files(folder)) == set(files)
        assert not list(folder.rglob("*.tmp"))
        outcomes.add(files["metrics.json"][0])
        if not killed:
            break
    assert outcomes == {"A", "B"} and n > 5  # kills before and after the journal, and a finished run


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


def test_a_reader_completes_an_interrupted_commit(tmp_path):
    """read_outputs and the training job's figures go through output_files: a journal left by a kill is
    completed before anything is read."""
    folder = tmp_path / "out"
    _write_set(folder, "A", RUN_A)
    staging = folder / "incomplete-20261204-000000-999999999"
    staging.mkdir()
    for name in RUN_B:
        (staging / name).write_text(f"B:{name}")
    os.replace(staging / "metrics.json", folder / "metrics.json")  # the kill came after the first rename
    journal = {"staging": staging.name, "files": RUN_B, "previous": RUN_A}
    atomic_write_text(folder / ".commit.json", json.dumps(journal))
    assert {p.name: p.read_text() for p in output_files(folder)} == {k: f"B:{k}" for k in RUN_B}
    assert not staging.exists() and not (folder / ".commit.json").exists()
