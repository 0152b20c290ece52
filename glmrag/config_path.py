"""Where the Hydra configs are: the source checkout's top-level ``configs/``, else the copy in the package.

A source checkout (and an editable install) reads ``<repo>/configs``; a wheel carries the same
files as ``glmrag/configs`` (copied at build time by ``setup.py``), which is used when the
top-level folder is absent. ``$GLMRAG_CONFIG_DIR`` overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_DIR_ENV = "GLMRAG_CONFIG_DIR"
_PACKAGE = Path(__file__).resolve().parent


def config_dir() -> Path:
    """The folder holding ``eval.yaml`` and ``train.yaml``; raises ``FileNotFoundError`` saying where it looked."""
    candidates = [Path(os.environ[CONFIG_DIR_ENV])] if os.environ.get(CONFIG_DIR_ENV) else []
    candidates += [_PACKAGE.parent / "configs", _PACKAGE / "configs"]
    for folder in candidates:
        if (folder / "eval.yaml").is_file():
            return folder
    raise FileNotFoundError(
        f"no glmrag configs (eval.yaml) in {', '.join(map(str, candidates))}; reinstall glmrag "
        f"or set {CONFIG_DIR_ENV} to a copy of the repository's configs/ folder"
    )
