"""kill -9 of a job leaves none of its forked workers running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.chaos.conftest import ROOT

pytestmark = pytest.mark.chaos

PARENT = textwrap.dedent(
    """
    import multiprocessing, sys, time
    from glmrag.io import children_die_with_parent

    children_die_with_parent()
    ctx = multiprocessing.get_context("fork")   # how spaCy n_process and DataLoader workers start on Linux
    workers = [ctx.Process(target=time.sleep, args=(120,)) for _ in range(2)]
    for w in workers:
        w.start()
    print(" ".join(str(w.pid) for w in workers), flush=True)
    time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()  # a zombie is dead, only not yet reaped
    except FileNotFoundError:
        return False


def test_forked_workers_die_within_seconds_of_a_kill_9_parent():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    workers = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(workers) == 2 and all(_alive(pid) for pid in workers)
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    for _ in range(50):  # bounded: 5 s
        if not any(_alive(pid) for pid in workers):
            break
        time.sleep(0.1)
    survivors = [pid for pid in workers if _alive(pid)]
    for pid in survivors:  # leave nothing behind on the old code either
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"workers {survivors} outlived their killed parent"
