"""Files on disk: the cache root, and atomic writes (a reader sees the old file or the new one, never half)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CACHE_ENV = "GLMRAG_CACHE_DIR"


def cache_root() -> Path:
    """``$GLMRAG_CACHE_DIR`` or ``~/.cache/glmrag``: where every cache of glmrag lives (one folder per kind)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "glmrag").expanduser()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def default_mode(directory: bool = False) -> int:
    """The permissions ``open``/``mkdir`` would give (mkstemp/mkdtemp make private 0600/0700 files)."""
    return (0o777 if directory else 0o666) & ~_umask()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to a temp file beside ``path``, fsync it, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, default_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))
