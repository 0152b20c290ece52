"""A non-editable install works away from the repository: the configs ship in the package.

Slow (a venv and a wheel build, then an evaluation): ``pytest -m slow tests/test_packaging.py``. The wheel is
built by the interpreter running the tests (``--no-build-isolation``: its setuptools), installed with ``--no-deps``
into a fresh venv that sees the test environment's packages through a ``.pth`` line (the way ``.ci/run`` gives its
lower-bound venv the packages above it; ``--system-site-packages`` would show the base interpreter's, which may
have neither torch nor a setuptools with ``bdist_wheel``), so nothing is downloaded.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_glmrag_eval_from_a_non_editable_install_in_a_fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no source tree on the path
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # after the venv's own site-packages: torch and the rest; its .pth files (an editable glmrag) are not read
    (Path(site) / "test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = tmp_path / "src"  # setuptools builds in the source folder (build/, *.egg-info): not in the checkout
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", "dist", str(source)]
    subprocess.run(build, check=True, cwd=tmp_path, capture_output=True, text=True, env=clean)
    (wheel,) = (tmp_path / "dist").glob("glmrag-*.whl")
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
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
