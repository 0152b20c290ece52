"""A job run as a user runs it, in a subprocess, that leaves the stacks of its processes when it hangs
(importable as ``job_runs``: ``tests/`` is on the path)."""

from __future__ import annotations

import os
import signal
import subprocess
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path


class JobHung(Exception):
    """The job outlived its timeout; ``stacks`` is its stderr after every process of it printed its threads."""

    def __init__(self, timeout: float, stacks: str) -> None:
        super().__init__(f"the job ran past {timeout:.0f} s")
        self.stacks = stacks


def run_job(command: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``command`` in a session of its own; past ``timeout`` seconds, raise :class:`JobHung`.

    On a hang every process of the session (the launching rank, the ranks it started, their DataLoader
    workers) gets SIGABRT, which Python's faulthandler (``PYTHONFAULTHANDLER``) answers with the stack of each
    thread, so the failure shows where each one waited; then the session is killed.
    """
    proc = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=env | {"PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGABRT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            _, err = "", ""
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
        raise JobHung(timeout, err[-20000:]) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_job_once_more_if_hung(
    command: Sequence[str], cwd: Path, env: dict[str, str], timeout: float, before_retry: Callable[[], None]
) -> subprocess.CompletedProcess:
    """:func:`run_job`; a job that hangs is run once more (after ``before_retry()``, which clears what the
    hung run left), and the stacks of the hang become a warning.

    A 2-rank gloo job hung once on the CI machine, in a run of the whole suite, and in none of 16 local runs
    of the same job (tests/test_ddp_jobs.py, 2026-12-05): a second hang fails the test with both runs' stacks.
    """
    try:
        return run_job(command, cwd, env, timeout)
    except JobHung as first:
        before_retry()
        try:
            done = run_job(command, cwd, env, timeout)
        except JobHung as second:
            raise AssertionError(
                f"hung twice ({second}); first:\n{first.stacks[-8000:]}\nsecond:\n{second.stacks[-8000:]}"
            ) from None
        warnings.warn(f"the first run hung and was run again; its stacks:\n{first.stacks[-8000:]}", stacklevel=2)
        return done
