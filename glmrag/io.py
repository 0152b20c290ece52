"""Files on disk: the cache root, atomic writes (a reader sees the old file or the new one, never half),
checksummed cache files (arrays, tensor dicts and JSON records), and checkpoint paths that are loaded weights-only."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

log = logging.getLogger(__name__)

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


def atomic_write_stream(path: str | os.PathLike[str], write: Callable[[BinaryIO], Any], replace: bool = True) -> Path:
    """``write(file)`` into a temp file beside ``path``, fsync it, then rename it over ``path``: a kill at any
    moment leaves the old ``path`` or the new one, whole (in the same folder, the rename never copies). With
    ``replace`` false the temp file is linked to ``path`` instead, which raises ``FileExistsError`` when
    ``path`` exists: nothing is overwritten, even by a second writer racing this one. A write that fails raises
    an error naming ``path`` (:func:`write_error`), also when ``write`` hides the disk's error behind its own
    (torch.save reports a full disk as ``unexpected pos``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    watch = None
    try:
        with os.fdopen(fd, "wb") as f:
            watch = _WatchedFile(f)
            write(watch)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, default_mode())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        cause = watch.error if watch is not None and watch.error is not None and isinstance(err, Exception) else err
        if isinstance(cause, FileExistsError) and not replace:
            raise FileExistsError(errno.EEXIST, "exists; it is never replaced", str(path)) from None
        if isinstance(cause, OSError):
            raise write_error(path, cause) from err
        raise
    return path


class _WatchedFile:
    """A binary file that keeps the first error of its ``write``: a caller that replaces it with its own
    (torch's zip writer raises ``RuntimeError: unexpected pos``) cannot lose what the disk said."""

    def __init__(self, file: BinaryIO) -> None:
        self._file, self.error = file, None

    def write(self, data: Any) -> int:
        try:
            return self._file.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


NO_ROOM = {
    errno.ENOSPC: ("no space left on its filesystem", "free some space there or point the output elsewhere"),
    errno.EDQUOT: ("your disk quota there is used up", "free some of your files or point the output elsewhere"),
    errno.EFBIG: (
        "the file is larger than the file-size limit (ulimit -f) or its filesystem allows",
        "raise the limit (ulimit -f unlimited) or point the output elsewhere",
    ),
}
"""errno -> (what happened, the fix) for the write errors that mean "no room for this file"."""


class DiskFullError(OSError):
    """No room to write ``path`` (ENOSPC, EDQUOT or EFBIG: :data:`NO_ROOM`), with the path and the fix."""

    def __init__(self, path: str | os.PathLike[str], detail: str | None = None, code: int = errno.ENOSPC) -> None:
        what, fix = NO_ROOM[code]
        super().__init__(
            code,
            f"{path}: {detail or what}; {fix} (output_dir=..., checkpoint_dir=..., {CACHE_ENV}=...); files "
            "written before are kept, and none is left half-written",
        )


def write_error(path: str | os.PathLike[str], err: OSError) -> OSError:
    """``err``, raised while writing ``path``, as an error that names it: :class:`DiskFullError` when there is no
    room (a full disk, a used-up quota, a file-size limit), else the same kind of error with ``path`` as its
    file name (``os.write`` errors carry none)."""
    if isinstance(err, DiskFullError) or (err.filename is not None and err.errno not in NO_ROOM):
        return err
    if err.errno in NO_ROOM:
        return DiskFullError(path, code=err.errno)
    return type(err)(err.errno, err.strerror or str(err), str(path))


MIN_FREE_BYTES = 64 << 20
"""Free space a job wants in each folder it writes before it starts (a few tables, checkpoints of small models)."""


def check_room(folder: str | os.PathLike[str], what: str, min_free: int = MIN_FREE_BYTES, create: bool = True) -> Path:
    """:func:`check_writable`, and at least ``min_free`` bytes free there: before the work, not after it (a
    dangling or looping symbolic link on the way is refused by name). With
    ``create`` false a folder that does not exist yet is not made (a run that ends early leaves no trace): its
    nearest existing parent must be a folder this process may write, with the room."""
    folder = Path(folder)
    for link in (p for p in [folder, *folder.absolute().parents] if p.is_symlink() and not p.exists()):
        raise NotADirectoryError(
            f"{what} folder {folder}: {link} is a symbolic link to {os.readlink(link)}, which does not exist or "
            f"loops; point {what} elsewhere or fix the link"
        )
    if create or folder.is_dir():
        check_writable(folder, what)
        where = folder
    else:
        where = next(p for p in [folder, *folder.absolute().parents] if p.exists())
        if not where.is_dir() or not os.access(where, os.W_OK | os.X_OK):
            reason = "not a folder" if not where.is_dir() else "not writable"
            raise PermissionError(
                f"{what} folder {folder} is not writable ({where} is {reason}); point it elsewhere or fix its "
                "permissions"
            )
    free = shutil.disk_usage(where).free
    if free < min_free:
        raise DiskFullError(
            folder, f"{what} has {free / 2**20:.1f} MiB free, less than the {min_free >> 20} MiB a run needs"
        )
    return folder


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make the renames inside ``folder`` durable (a rename is a change of the folder)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, replace: bool = True) -> Path:
    """Write ``data`` to a temp file beside ``path``, fsync it, then rename it over ``path``
    (:func:`atomic_write_stream`; ``replace=False``: never over an existing file)."""
    return atomic_write_stream(path, lambda f: f.write(data), replace)


def atomic_write_text(path: str | os.PathLike[str], text: str, replace: bool = True) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), replace)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def temporary_sibling(folder: str | os.PathLike[str]) -> Path:
    """A new empty folder ``.<name>.tmp-*`` beside ``folder`` (its parent made if missing), with the
    project's folder mode: where a folder is written before it is renamed into place."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    os.chmod(tmp, default_mode(directory=True))
    return tmp


def atomic_write_folder(folder: str | os.PathLike[str], files: Mapping[str, bytes]) -> Path:
    """Write ``files`` (name -> bytes) as the folder ``folder``, replacing any folder there, all or nothing.

    The files go to a temporary sibling ``.<name>.tmp-*``, are fsynced and the sibling is renamed into place;
    an old folder is moved aside first (a crash between the renames leaves it in a ``.<name>.old-*`` sibling,
    never a mixed folder) and removed after. Write errors name ``folder`` (:func:`write_error`).
    """
    folder = Path(folder)
    tmp = temporary_sibling(folder)
    old = None
    try:
        for name, data in files.items():
            _write_synced(tmp / name, data)
        fsync_dir(tmp)
        if folder.exists():
            old = folder.parent / f".{folder.name}.old-{os.urandom(4).hex()}"
            os.rename(folder, old)
        os.rename(tmp, folder)
        fsync_dir(folder.parent)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, OSError):
            raise write_error(folder, err) from err
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return folder


# --- checkpoints: local files, loaded weights-only -------------------------------------------------------

_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class CheckpointPathError(ValueError):
    """A checkpoint path that glmrag refuses to load: unset, remote, or not a file."""


def local_checkpoint(path: str | os.PathLike[str] | None, key: str = "ckpt_path") -> Path:
    """``path`` as a local checkpoint file, or :class:`CheckpointPathError` naming ``key`` and the fix.

    URLs (``http://``, ``s3://``, ...) are refused: Lightning unpickles a downloaded checkpoint with
    ``weights_only=False``, which runs any code the file holds. Download it yourself, check where it comes
    from, and pass the local path (loaded weights-only).
    """
    if path is None or not str(path).strip():
        raise CheckpointPathError(f"{key} is not set; pass {key}=<a .ckpt written by train.py>")
    text = str(path)
    if _REMOTE.match(text):
        raise CheckpointPathError(
            f"{key}={text}: remote checkpoints are refused (Lightning would unpickle a download with "
            "weights_only=False, i.e. run code from the file); download it, check its source and pass the local path"
        )
    local = Path(text).expanduser()
    if not local.is_file():
        raise CheckpointPathError(f"{key}={text}: no such checkpoint file ({local.resolve()} does not exist)")
    return local


def verify_checkpoint(path: str | os.PathLike[str], key: str = "ckpt_path") -> Path:
    """``path`` when every member of its zip (torch's checkpoint format) matches its stored CRC-32; else
    :class:`CheckpointPathError` naming the file and the member: a checkpoint changed after it was written (a
    disk or copy error, one flipped bit) would otherwise load and score plausible, wrong numbers. Reads the
    whole file once per process (about 1 s a GB), not again while its size and mtime stay."""
    import zipfile

    path = Path(path)
    stat = path.stat()
    stamp = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if stamp in _VERIFIED:  # eval.py's config check, the retriever loader and its module read one file
        return path
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise CheckpointPathError(
            f"{key}={path}: the file is truncated or not a torch checkpoint ({type(err).__name__}: {err}); use "
            "another checkpoint of its folder, or copy it again"
        ) from err
    if bad is not None:
        raise CheckpointPathError(
            f"{key}={path}: corrupted: its member {bad!r} fails its CRC-32 check (the file changed after it was "
            "written: a disk or copy error); use another checkpoint of its folder, or copy it again from its source"
        )
    _VERIFIED.add(stamp)
    return path


_VERIFIED: set[tuple] = set()
"""``(path, inode, size, mtime)`` of the checkpoints :func:`verify_checkpoint` passed in this process: a file
changed since (a new size or mtime) is read again."""


def load_checkpoint_dict(path: str | os.PathLike[str], key: str = "ckpt_path") -> dict:
    """The checkpoint dict of a local file whose CRCs hold (:func:`verify_checkpoint`), unpickled weights-only
    (tensors and plain values, never code)."""
    import pickle

    import torch

    local = verify_checkpoint(local_checkpoint(path, key), key)
    try:
        ckpt = torch.load(local, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        raise CheckpointPathError(
            f"{key}={path}: not a weights-only checkpoint ({type(err).__name__}: {str(err)[:300]}); "
            "only checkpoints of tensors and plain values are loaded"
        ) from err
    if not isinstance(ckpt, dict):
        raise CheckpointPathError(f"{key}={path}: holds a {type(ckpt).__name__}, not a Lightning checkpoint dict")
    return ckpt


# --- caches: atomic, checksummed, loaded with a clear error ----------------------------------------------
#
# Every cache file is CACHE_MAGIC, the SHA-256 of the payload in hex, a newline, then the payload (an .npy
# array, a weights-only torch.save dict or UTF-8 JSON). Writes are atomic (atomic_write_bytes), so concurrent
# writers need no lock: a reader sees one writer's whole file or another's, never a mix, and two writers of one
# key write the same record (the key hashes everything the record depends on), so the last rename losing the
# other's is harmless.

CACHE_MAGIC = b"GLMRAG-CACHE-1\n"


class CacheError(RuntimeError):
    """A cache file that cannot be trusted (truncated, edited, of another format); delete it to rebuild."""


class CacheFormatError(CacheError):
    """A file without the cache header: written by an older glmrag (before checksums) or not a cache file."""


def _write_cache_payload(path: str | os.PathLike[str], payload: bytes) -> Path:
    return atomic_write_bytes(path, CACHE_MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)


def _read_cache_payload(path: Path) -> bytes:
    """The checked payload of a cache file, or :class:`CacheError` naming the file."""
    try:
        blob = path.read_bytes()
    except OSError as err:
        raise CacheError(f"{path}: unreadable cache ({err}); delete it to rebuild") from err
    head, _, rest = blob.partition(b"\n")
    digest, _, payload = rest.partition(b"\n")
    if head + b"\n" != CACHE_MAGIC:
        raise CacheFormatError(
            f"{path}: not a glmrag cache file (an older format or another file); delete it to rebuild"
        )
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CacheError(f"{path}: checksum mismatch (truncated or edited); delete it to rebuild")
    return payload


def write_cache_array(path: str | os.PathLike[str], array: np.ndarray) -> Path:
    """Save ``array`` (no objects) at ``path`` atomically, behind a header with its SHA-256."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return _write_cache_payload(path, buf.getvalue())


def read_cache_array(path: str | os.PathLike[str]) -> np.ndarray:
    """The array saved by :func:`write_cache_array`; :class:`CacheError` (naming the file) when it is not intact."""
    path = Path(path)
    payload = _read_cache_payload(path)
    try:
        return np.load(io.BytesIO(payload), allow_pickle=False)
    except (ValueError, OSError) as err:
        raise CacheError(f"{path}: unreadable array ({err}); delete it to rebuild") from err


def load_cached_array(path: str | os.PathLike[str], what: str = "array cache") -> np.ndarray | None:
    """The cached array at ``path``, or None (logged) when it is missing or not intact, so the caller rebuilds it.

    ``what`` names the cache in the warnings (see :func:`load_cached_json`)."""
    return _load_cached(read_cache_array, path, what)


def load_cached_tensors(path: str | os.PathLike[str], what: str = "tensor cache") -> dict[str, Any] | None:
    """The cached dict at ``path``, or None (logged, naming the file) when it is missing or not intact."""
    return _load_cached(read_cache_tensors, path, what)


def write_cache_tensors(path: str | os.PathLike[str], value: Mapping[str, Any]) -> Path:
    """Save a dict of tensors, lists, strings and numbers at ``path`` atomically, behind a header with its SHA-256.

    Written with ``torch.save`` and read back weights-only (:func:`read_cache_tensors`), so a cache file can
    never run code: only tensors and plain containers load.
    """
    import torch  # here, not at the top: the io floor is imported by modules that never touch torch

    buf = io.BytesIO()
    torch.save(dict(value), buf)
    return _write_cache_payload(path, buf.getvalue())


def read_cache_tensors(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The dict saved by :func:`write_cache_tensors`; :class:`CacheError` (naming the file) when it is not intact
    or holds anything but tensors and plain containers."""
    import torch

    path = Path(path)
    payload = _read_cache_payload(path)
    try:
        value = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as err:  # torch raises pickle, zip and runtime errors alike for a payload it refuses
        raise CacheError(f"{path}: unreadable tensors ({err}); delete it to rebuild") from err
    if not isinstance(value, dict):
        raise CacheError(f"{path}: holds a {type(value).__name__}, not a dict of tensors; delete it to rebuild")
    return value


def write_cache_json(path: str | os.PathLike[str], record: Any) -> Path:
    """Save a JSON-serialisable ``record`` at ``path`` atomically, behind a header with its SHA-256."""
    text = json.dumps(record, ensure_ascii=False, indent=1, allow_nan=False)
    return _write_cache_payload(path, text.encode("utf-8"))


def read_cache_json(path: str | os.PathLike[str]) -> Any:
    """The record saved by :func:`write_cache_json`; :class:`CacheError` (naming the file) when it is not intact
    (:class:`CacheFormatError` for a file without the header, e.g. a plain JSON record of an older glmrag)."""
    path = Path(path)
    payload = _read_cache_payload(path)
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CacheError(f"{path}: unreadable JSON record ({err}); delete it to rebuild") from err


_warned_old_format: set[str] = set()


def load_cached_json(path: str | os.PathLike[str], what: str) -> Any | None:
    """The cached record at ``path``, or None when it is missing or not intact, so the caller redoes and rewrites it.

    ``what`` names the cache in the warnings. A corrupt record is logged each time; records of the older,
    checksum-less format are expected after an upgrade (a cache folder holds thousands), so they are logged
    once per ``what`` and process.
    """
    return _load_cached(read_cache_json, path, what)


def _load_cached(read: Callable[[Path], Any], path: str | os.PathLike[str], what: str) -> Any | None:
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return read(path)
    except CacheFormatError as err:
        if what not in _warned_old_format:
            _warned_old_format.add(what)
            log.warning(
                "%s: files without a checksum (an older glmrag) are redone and rewritten; "
                "this is logged once. First: %s",
                what,
                err,
            )
        return None
    except CacheError as err:
        log.warning("%s: ignoring a bad cache file, redoing it: %s", what, err)
        return None


def check_writable(folder: str | os.PathLike[str], what: str) -> Path:
    """Create ``folder`` and prove a file can be written there, before any slow work whose result goes there."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise PermissionError(
            f"{what} folder {folder} is not writable ({err.strerror}); point it elsewhere "
            f"(e.g. {CACHE_ENV}=/some/writable/dir) or fix its permissions"
        ) from err
    return folder


class LockTimeout(TimeoutError):
    """A lock another process held for longer than the caller would wait; names the lock and the fix."""


@contextlib.contextmanager
def file_lock(
    path: str | os.PathLike[str], shared: bool = False, timeout: float | None = None, what: str = "the lock"
) -> Iterator[bool]:
    """Hold an ``flock`` on ``path`` (created if needed): shared for readers, exclusive for a writer; released
    when the block ends or the process dies. After ``timeout`` seconds of waiting (None: no limit) raise
    :class:`LockTimeout` naming ``what``. Yields False when the lock file cannot be created (a read-only
    folder: no one can write there either, so reading without a lock is safe).

    ``fcntl.flock`` directly: the ``filelock`` package's FileLock has no shared mode, and its ReadWriteLock
    keeps its state in SQLite."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, default_mode())
    except OSError:
        yield False
        return
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"{what} {path} is held by another process; gave up after {timeout:g} s"
                    ) from None
                time.sleep(0.2)
        yield True
    finally:
        os.close(fd)  # closing drops the lock


# --- child processes die with their parent -------------------------------------------------------------

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_children_die_installed = False


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl (not Linux): children may outlive a killed parent
        return
    if os.getppid() != parent:  # the parent died before prctl: nobody is left to signal us
        os._exit(1)


def children_die_with_parent() -> None:
    """Every process forked from now on (spaCy ``n_process`` workers, DataLoader workers) gets SIGKILL when
    the process that forked it dies, even by ``kill -9`` or the OOM killer, instead of living on with ppid 1.

    Linux ``prctl(PR_SET_PDEATHSIG)``; the signal follows the forking *thread*, so fork from the main thread.
    Idempotent. ``subprocess`` children (fork + exec in C) are not affected.
    """
    global _children_die_installed
    if _children_die_installed or not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(
        before=lambda: _fork_parent.__setitem__(0, os.getpid()),
        after_in_child=lambda: _die_with_parent(_fork_parent[0]),
    )
    _children_die_installed = True


_fork_parent = [0]


def plain_container(value: Any) -> Any:
    """``value`` with every mapping turned into a ``dict`` and every non-string sequence into a ``list``, all
    the way down: a config node (an OmegaConf ``DictConfig`` is a mapping, its interpolations resolved as they
    are read) becomes plain data that a checkpoint stores and ``weights_only`` loading reads back."""
    if isinstance(value, Mapping):
        return {str(k): plain_container(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain_container(v) for v in value]
    return value
