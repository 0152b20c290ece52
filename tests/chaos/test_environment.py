"""The test suite does not depend on how the caller's shell is set up (issue 22, probe 83)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.integration]  # a pytest run in a subprocess

ROOT = Path(__file__).resolve().parents[2]
CALLER = {"WANDB_MODE": "disabled", "WANDB_API_KEY": "k" * 40, "GLMRAG_RUN_ID": "fixed", "SLURM_JOB_ID": "7"}


def test_the_wandb_mode_test_passes_whatever_the_shell_sets():
    test = "tests/test_train_cli.py::test_wandb_mode_follows_login"
    env = {**os.environ, **CALLER}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:]
