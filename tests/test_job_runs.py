"""The test helper that runs jobs (tests/job_runs.py): a hang shows where every process of the job waited. It
serves the integration jobs, so it runs with them (``-m integration``)."""

from __future__ import annotations

import os
import sys

import pytest
from job_runs import JobHung, run_job, run_job_once_more_if_hung

pytestmark = pytest.mark.integration

RANK_ONE = "import time\\ndef rank_one_waits():\\n    time.sleep(60)\\nrank_one_waits()"
HANGS = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "{RANK_ONE}"])
def rank_zero_waits():
    time.sleep(60)
rank_zero_waits()
"""


def test_a_hung_job_leaves_the_stacks_of_all_its_processes(tmp_path):
    with pytest.raises(JobHung) as hung:
        run_job([sys.executable, "-c", HANGS], tmp_path, dict(os.environ), timeout=3)
    assert "rank_zero_waits" in hung.value.stacks and "rank_one_waits" in hung.value.stacks


def test_a_second_hang_fails_with_both_stacks_and_one_hang_is_retried(tmp_path):
    cleared = []
    with pytest.raises(AssertionError, match="hung twice") as failed:
        run_job_once_more_if_hung(
            [sys.executable, "-c", HANGS], tmp_path, dict(os.environ), 3, lambda: cleared.append(1)
        )
    assert cleared == [1] and str(failed.value).count("rank_zero_waits") == 2
    flag = tmp_path / "hung_once"
    once = f"import pathlib, time\np = pathlib.Path({str(flag)!r})\nif not p.exists():\n    p.touch(); time.sleep(60)"
    with pytest.warns(UserWarning, match="the first run hung"):
        done = run_job_once_more_if_hung([sys.executable, "-c", once], tmp_path, dict(os.environ), 3, lambda: None)
    assert done.returncode == 0
