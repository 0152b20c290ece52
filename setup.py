"""Ships the top-level ``configs/`` inside the wheel as ``glmrag/configs`` (the rest is in pyproject.toml).

The configs stay at the top of the repository (Hydra's layout); a non-editable install finds the copy
through :func:`glmrag.jobs.config_path.config_dir`.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithConfigs(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "glmrag" / "configs"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(ROOT / "configs", target, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithConfigs})
