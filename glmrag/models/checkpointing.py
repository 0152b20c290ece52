"""Checkpoints that stay in their run folder and survive a kill.

* :class:`RunCheckpoint` is Lightning's ModelCheckpoint that trusts no path read from a checkpoint: a stored
  best or top-k path outside the run folder is dropped with a warning (Lightning would delete it, and test
  and evaluate it), and a run folder that was moved or copied keeps its best score.
* :class:`AtomicCheckpointIO` writes every checkpoint to a temp file in its own folder, fsyncs and renames
  it; Lightning's fsspec write copies a temp file across filesystems, so a kill can empty ``last.ckpt``.
* :func:`readable_checkpoint` names a truncated file instead of torch's bare ``EOFError``.
* :func:`check_layout` refuses a checkpoint whose hyper-parameters are in another layout (:data:`HPARAMS_LAYOUT`).
"""

from __future__ import annotations

import logging
import os
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from glmrag.io import CheckpointPathError, atomic_write_stream, verify_checkpoint

log = logging.getLogger(__name__)

SEEN_QUESTIONS_KEY = "glmrag_seen_questions"
"""Checkpoint entry: the sorted fingerprints of the questions the run trained and validated on."""
SEEN_VERSION_KEY = "glmrag_seen_questions_version"
"""Checkpoint entry: the rule that made those fingerprints (:data:`glmrag.data.types.FINGERPRINT_VERSION`)."""
HPARAMS_LAYOUT = 3
"""The layout of a module's hyper-parameters in its checkpoints, saved with them (:data:`HPARAMS_LAYOUT_KEY`):
one node per settings dataclass (``gnn.hidden_channels``), the GLM's encoder as ``glm.encoder`` and
``glm.encoder_config``."""
HPARAMS_LAYOUT_KEY = "glmrag_hparams_layout"
"""Checkpoint entry: the :data:`HPARAMS_LAYOUT` its hyper-parameters were saved in."""
PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")
"""The paths a ModelCheckpoint's state holds besides its ``best_k_models``."""


def readable_checkpoint(path: str | os.PathLike[str], key: str = "ckpt_path") -> Path:
    """``path`` when it is a whole checkpoint (torch's zip format, central directory present) whose members
    match their CRCs (:func:`~glmrag.io.verify_checkpoint`); else :class:`CheckpointPathError` naming it: a kill
    while it was written, a flipped bit since, or not a checkpoint."""
    path = Path(path)
    if path.stat().st_size == 0 or not zipfile.is_zipfile(path):
        raise CheckpointPathError(
            f"{key}={path}: the file is truncated or not a torch checkpoint ({path.stat().st_size} bytes; a kill "
            "while it was written?); resume from another checkpoint of its folder, or delete it to start afresh"
        )
    return verify_checkpoint(path, key)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, writing a temp file beside the target, fsynced, then renamed over it:
    a kill at any moment leaves the previous checkpoint whole (``configs/trainer/default.yaml``)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)  # remote stores: fsspec's own
        atomic_write_stream(path, lambda f: torch.save(checkpoint, f))


def _inside(path: str, stored_dir: str | None, own_dir: Path) -> str | None:
    """``path`` (read from a checkpoint) moved into ``own_dir``: its file name there, when it named a ``.ckpt``
    directly in the checkpoint's own folder ``stored_dir``; None for any other path."""
    stored = Path(os.path.normpath(stored_dir)) if stored_dir else own_dir
    normal = Path(os.path.normpath(path))
    if normal.parent not in (stored, own_dir) or normal.suffix != ".ckpt":
        return None
    return str(own_dir / normal.name)


class RunCheckpoint(ModelCheckpoint):
    """A ModelCheckpoint whose restored paths lie in its own ``dirpath``; a moved run folder keeps its best.

    Every path of the restored state must name a ``.ckpt`` directly in the folder the checkpoint was saved
    from (its stored ``dirpath``) or in this one; it is re-pointed to this folder, and any other path is dropped
    with a warning. When the folder moved, the best score is carried when the best file is here too; without
    that file the best score is dropped, with a warning saying so. Files are only ever removed from ``dirpath``.
    """

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        own = Path(self.dirpath)
        stored = state_dict.get("dirpath")
        state = dict(state_dict, dirpath=self.dirpath)  # Lightning restores the scores only for its own dirpath

        def confine(path: str | None, what: str) -> str:
            if not path:
                return ""
            moved = _inside(path, stored, own)
            if moved is None:
                log.warning("checkpoint state: %s %r is outside the run folder %s; dropped", what, path, own)
                return ""
            return moved

        for key in PATH_KEYS:
            state[key] = confine(state_dict.get(key), key)
        best_k = {confine(p, "a best-k path"): score for p, score in (state_dict.get("best_k_models") or {}).items()}
        state["best_k_models"] = {p: score for p, score in best_k.items() if p}
        if stored and Path(os.path.normpath(stored)) != own:
            self._carry_moved_best(state, stored)
        super().load_state_dict(state)

    def _carry_moved_best(self, state: dict[str, Any], stored: str) -> None:
        """The run folder moved from ``stored``: keep the best score when its file came along, else drop it."""
        best = state["best_model_path"]
        if best and Path(best).is_file():
            log.info("run folder moved from %s to %s: its best checkpoint and score carry over", stored, self.dirpath)
            return
        log.warning(
            "run folder moved from %s to %s without its best checkpoint %r: the best score is dropped, and the best "
            "is chosen again among the epochs from here on",
            stored,
            self.dirpath,
            Path(best).name if best else None,
        )
        state.update(best_model_path="", kth_best_model_path="", best_k_models={}, best_model_score=None)
        state.pop("kth_value", None)  # Lightning's start value for the mode

    def _remove_checkpoint(self, trainer: Any, filepath: str) -> None:
        if Path(os.path.normpath(filepath)).parent != Path(self.dirpath):
            log.warning("not removing %s: outside the run folder %s", filepath, self.dirpath)
            return
        super()._remove_checkpoint(trainer, filepath)


def whole_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a whole torch checkpoint (its zip directory, written last, is there)."""
    path = Path(path)
    return path.is_file() and path.stat().st_size > 0 and zipfile.is_zipfile(path)


class CheckpointMismatchError(ValueError):
    """A checkpoint whose weights do not fit the configured model; names the key and both settings."""


def _differing_settings(saved: dict[str, Any], own: dict[str, Any]) -> list[str]:
    """``key: saved -> own`` for the plain hyper-parameters that differ (nested ones by their dotted key)."""
    out = []
    for key in sorted(set(saved) | set(own)):
        a, b = saved.get(key), own.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{line}" for line in _differing_settings(a, b)]
        elif a != b and not isinstance(a, dict | list) and not isinstance(b, dict | list):
            out.append(f"{key}: {a!r} in the checkpoint, {b!r} here")
    return out


def check_architecture(module: torch.nn.Module, path: str | os.PathLike[str], key: str = "ckpt_path") -> None:
    """Raise :class:`CheckpointMismatchError` when the weights in ``path`` do not fit ``module``: the first
    parameter whose shape differs (or that one side lacks), and the hyper-parameters that differ."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    saved, own = ckpt.get("state_dict", {}), module.state_dict()
    shapes = [(k, tuple(saved[k].shape), tuple(v.shape)) for k, v in own.items() if k in saved]
    wrong = [f"{k} has shape {a} in the checkpoint and {b} here" for k, a, b in shapes if a != b]
    wrong += [f"{k} is missing from the checkpoint" for k in own if k not in saved]
    wrong += [f"{k} is in the checkpoint but not in this model" for k in saved if k not in own]
    if not wrong:
        return
    settings = _differing_settings(dict(ckpt.get("hyper_parameters") or {}), dict(getattr(module, "hparams", {})))
    raise CheckpointMismatchError(
        f"{key}={path} holds another architecture than this run's model: {wrong[0]}"
        + (f" ({len(wrong) - 1} more)" if len(wrong) > 1 else "")
        + f". Settings that differ: {'; '.join(settings) or 'none recorded'}. Resume with the checkpoint's "
        "settings, or start a new run (no ckpt_path; model.init_from loads weights into a new run)"
    )


class CheckpointLayoutError(ValueError):
    """A checkpoint whose hyper-parameters are in another layout than this glmrag's; names it and the fix."""


def check_layout(path: Any, weights_only: bool = True) -> None:
    """Raise :class:`CheckpointLayoutError` unless the checkpoint at ``path`` (a path, or a seekable file object,
    left where it was) records today's :data:`HPARAMS_LAYOUT`."""
    start = path.tell() if hasattr(path, "read") else None  # a path is read memory-mapped
    layout = torch.load(path, map_location="cpu", weights_only=weights_only, mmap=start is None).get(HPARAMS_LAYOUT_KEY)
    if start is not None:
        path.seek(start)
    if layout != HPARAMS_LAYOUT:
        held = "no layout (saved before layouts were recorded)" if layout is None else f"layout {layout!r}"
        raise CheckpointLayoutError(
            f"checkpoint {path}: its hyper-parameters are in {held}; this glmrag reads layout {HPARAMS_LAYOUT} only. "
            "Train the model again, or load it with the glmrag version that saved it"
        )
