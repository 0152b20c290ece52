"""A scheduler stops ``train.py`` and starts it again: SIGTERM, and SLURM's SIGUSR1 requeue, on CPU.

The job runs as a user runs it (``train.py`` in a subprocess, from an empty folder). At the signal it saves a
resumable checkpoint and exits 143, not 0, so the scheduler requeues it; the same command with
``ckpt_path=last`` resumes at the saved global step with the saved best score, and finishes.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from glmrag.jobs.run_folder import resume_checkpoint
from glmrag.jobs.train import PREEMPTED_EXIT_CODE

ROOT = Path(__file__).resolve().parents[1]
JOB = [
    "experiment=demo",
    "run_name=preempted",  # fixed: the resumed command below changes max_epochs, which names runs otherwise
    "model.gnn.hidden_channels=8",
    "model.gnn.num_layers=1",
    "data.limit=8",
    "retriever@baselines=[ppr]",
    "logger=[csv]",
    "n_boot=50",
]
SLURM = {
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NAME": "train",
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}

pytestmark = pytest.mark.integration


@pytest.fixture
def job(glmrag_cache, tmp_path):
    """``job(overrides, env=None, folder=tmp_path) -> Popen``: ``python train.py`` with :data:`JOB` and
    ``overrides`` in ``folder``, its output in ``folder/job<n>.log``."""
    base = {n: v for n, v in os.environ.items() if not n.startswith("SLURM_")}
    base |= {"GLMRAG_CACHE_DIR": str(glmrag_cache), "PYTHONPATH": str(ROOT / "tests")}  # stand_ins' callbacks

    def start(overrides: list[str], env: dict[str, str] | None = None, folder: Path = tmp_path) -> subprocess.Popen:
        folder.mkdir(exist_ok=True)
        if not (folder / "train.py").exists():
            (folder / "train.py").symlink_to(ROOT / "train.py")
        log = open(folder / f"job{len(list(folder.glob('job*.log')))}.log", "w")  # noqa: SIM115
        command = [sys.executable, "train.py", *JOB, *overrides]
        return subprocess.Popen(command, cwd=folder, env=base | (env or {}), stdout=log, stderr=subprocess.STDOUT)

    return start


def wait_for(pattern: str, folder: Path, proc: subprocess.Popen, timeout: float = 600) -> Path:
    """The first file matching ``pattern`` under ``folder`` once it exists (the job must still run)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(folder.glob(pattern))
        if found:
            return found[0]
        assert proc.poll() is None, f"the job ended first (exit code {proc.returncode})"
        time.sleep(0.2)
    raise AssertionError(f"no {pattern} under {folder} after {timeout} s")


def saved_state(path: Path) -> tuple[int, int, float]:
    """Global step, epoch and the best val/recall@2 of ModelCheckpoint held by a checkpoint."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    (best,) = [s["best_model_score"] for k, s in ckpt["callbacks"].items() if "val/recall@2" in k]
    return ckpt["global_step"], ckpt["epoch"], float(best)


def resume_and_check(job, tmp_path: Path, saved: Path, env: dict[str, str] | None = None) -> None:
    """Run the job again with ``ckpt_path=last``: it starts at ``saved``'s step and best score and finishes."""
    step, epoch, best = saved_state(saved)
    probe = tmp_path / "probe.json"
    resumed = job(
        ["ckpt_path=last", f"trainer.max_epochs={epoch + 2}", "+callbacks.probe._target_=stand_ins.ResumeProbe"]
        + [f"+callbacks.probe.path={probe}"],
        env,
    )
    assert resumed.wait(timeout=900) == 0, (tmp_path / "job1.log").read_text()[-4000:]
    assert json.loads(probe.read_text()) == {"global_step": step, "best_model_score": [best]}
    stored = list((tmp_path / "results" / "adhoc").glob("preempted*/metrics.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["reference"] == "preempted"


def test_sigterm_saves_exits_143_and_resumes(job, tmp_path):
    proc = job(["trainer.max_epochs=1000"])
    wait_for("checkpoints/preempted/*/last.ckpt", tmp_path, proc)  # past the first epoch
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == PREEMPTED_EXIT_CODE == 143
    log = (tmp_path / "job0.log").read_text()
    assert "SIGTERM at global step" in log and "resume with the same command and ckpt_path=last" in log
    (folder,) = [p for p in (tmp_path / "checkpoints" / "preempted").iterdir() if p.is_dir()]  # beside: its lock
    assert not list(folder.glob("*.partial"))
    assert not (tmp_path / "results").exists()  # stopped before the evaluation: nothing filed
    resume_and_check(job, tmp_path, folder / "last.ckpt")


def test_slurm_requeue_signal_saves_and_requeues(job, tmp_path):
    bin_dir = tmp_path / "bin"  # a stand-in scontrol that records how it was called
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = SLURM | {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = job(["trainer.max_epochs=1000"], slurm)
    folder = tmp_path / "checkpoints" / "preempted" / "slurm-4242"  # run_id: the job id a requeue keeps
    wait_for("last.ckpt", folder, proc)
    proc.send_signal(signal.SIGUSR1)  # sbatch --signal=SIGUSR1@90: the time limit is near
    wait_for("hpc_ckpt_1.ckpt", folder, proc)  # Lightning's SLURMEnvironment, in trainer.default_root_dir
    deadline = time.monotonic() + 60
    while not (tmp_path / "scontrol.log").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]
    proc.send_signal(signal.SIGTERM)  # what SLURM sends when it requeues the job
    assert proc.wait(timeout=300) == PREEMPTED_EXIT_CODE
    resume_and_check(job, tmp_path, Path(resume_checkpoint(folder)), slurm)  # the newer of last.ckpt, hpc_ckpt_1


def logged_losses(folder: Path) -> list[tuple[int, float]]:
    """(step, train/loss) of every logged step of the CSV logs under ``folder``, in step order."""
    rows = [r for path in folder.glob("outputs/**/csv/version_*/metrics.csv") for r in csv.DictReader(path.open())]
    return sorted((int(r["step"]), float(r["train/loss"])) for r in rows if r.get("train/loss"))


@pytest.mark.parametrize("store", ["memory", "litdata"])
def test_a_job_stopped_mid_epoch_resumes_as_if_never_stopped(store, job, tmp_path):
    """``python train.py`` as a user runs it, stopped by SIGTERM in the middle of its second epoch and started
    again with ``ckpt_path=last``: every training step's loss, and the evaluation filed at the end, are the
    uninterrupted job's. The demo's per-step schedule makes Lightning build the training loader before it
    restores the checkpoint (:func:`glmrag.models.resumable.load_pending_loader_state`)."""
    per_epoch = 6  # data.limit=12 at batch size 2
    stop = per_epoch + per_epoch // 2
    # same overrides in every run of one folder (the resumed command is the stopped one + ckpt_path=last)
    same = ["data.limit=12", "datamodule.batch_size=2", "trainer.max_epochs=2", "trainer.log_every_n_steps=1"]
    same += [f"datamodule.store={store}", "+callbacks.stop._target_=stand_ins.SigtermAfterStep"]

    def run(folder: Path, *overrides: str) -> int:
        code = job([*same, *overrides], folder=folder).wait(timeout=900)
        log = sorted(folder.glob("job*.log"))[-1]
        assert code in (0, PREEMPTED_EXIT_CODE), log.read_text()[-4000:]
        return code

    assert run(tmp_path / "whole", "+callbacks.stop.step=-1") == 0
    whole = logged_losses(tmp_path / "whole")
    assert [s for s, _ in whole] == list(range(2 * per_epoch))
    stopped = tmp_path / "stopped"
    assert run(stopped, f"+callbacks.stop.step={stop}") == PREEMPTED_EXIT_CODE
    assert [s for s, _ in logged_losses(stopped)] == list(range(stop))
    assert run(stopped, f"+callbacks.stop.step={stop}", "ckpt_path=last") == 0
    assert logged_losses(stopped) == whole  # exactly, step by step: the same batches, weights and schedule

    def filed(folder: Path) -> dict:
        (path,) = folder.glob("results/adhoc/*/metrics.json")
        return json.loads(path.read_text())["overall"]

    assert filed(stopped) == filed(tmp_path / "whole")
