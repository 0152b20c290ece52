"""A non-editable install works away from the repository: the configs ship in the package.

Slow (a venv and a wheel build, then an evaluation): ``pytest -m slow tests/test_packaging.py``. The venv
sees the system's packages (``--system-site-packages``) and glmrag is installed with ``--no-deps
--no-build-isolation``, so nothing is downloaded.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_glmrag_eval_from_a_non_editable_install_in_a_fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no source tree on the path
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    # the venv's bundled setuptools can be older than the system's (and lack bdist_wheel): use the system's
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "setuptools"], check=True, env=clean)
    source = tmp_path / "src"  # setuptools builds in the source folder (build/, *.egg-info): not in the checkout
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(source)]
    subprocess.run(pip, check=True, cwd=tmp_path, capture_output=True, text=True, env=clean)

    elsewhere = tmp_path / "work"  # no configs/ folder here: Hydra must read the package's copy
    elsewhere.mkdir()
    show = "import glmrag, glmrag.jobs.config_path as c; print(glmrag.__file__); print(c.config_dir())"
    where = subprocess.run(
        [str(python), "-c", show],
        check=True,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=clean,
    ).stdout.split()
    assert all(str(venv) in line for line in where), where  # the installed copy, not a source checkout
    assert where[1].endswith("glmrag/configs")

    env = {"GLMRAG_CACHE_DIR": str(tmp_path / "cache"), "PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    cmd = [str(bin_dir / "glmrag-eval"), "data=toy", "output_dir=out", "n_boot=50", "results_dir=res"]
    done = subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| dense (ref) |" in done.stdout
    assert set(json.loads((elsewhere / "out" / "metrics.json").read_text())["overall"]) == {"dense", "ppr"}
