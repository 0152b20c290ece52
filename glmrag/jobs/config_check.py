"""The command-line settings of ``train.py`` and ``eval.py``, checked once, before any work starts.

Hydra hands over whatever the user typed (``ks=[1.5]``, ``top_k=-5``, ``data.limit=0``); these checks turn
each such value into one :class:`ConfigError` that names the key, the value and what is allowed, instead of
a silently different run (``1.5`` read as recall@1) or a raw Python error minutes later. Checkpoint paths are
checked here too (set, local, existing): a remote one would be unpickled by Lightning with code execution.
"""

from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig, ListConfig, OmegaConf

from glmrag.io import CheckpointPathError, local_checkpoint


class ConfigError(ValueError):
    """A setting outside its allowed range; the message names the key, the value and the range."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(cfg: DictConfig, key: str, allow_none: bool = False) -> int | None:
    """``cfg.<key>`` as an int >= 1 (or None when ``allow_none``); :class:`ConfigError` otherwise."""
    value = OmegaConf.select(cfg, key)
    if value is None and allow_none:
        return None
    if not _is_int(value) or value < 1:
        allowed = "an integer >= 1" + (" or null" if allow_none else "")
        raise ConfigError(f"{key}={value!r}: must be {allowed}")
    return value


def check_ks(cfg: DictConfig, key: str = "ks") -> list[int]:
    """``cfg.ks``: a non-empty list of distinct integers >= 1 (the k of recall@k)."""
    ks = OmegaConf.select(cfg, key)
    if not isinstance(ks, ListConfig | list) or len(ks) == 0:
        raise ConfigError(f"{key}={ks!r}: must be a non-empty list of integers >= 1, e.g. {key}=[1,2,5,10]")
    for k in ks:
        if not _is_int(k) or k < 1:
            raise ConfigError(f"{key}={list(ks)!r}: {k!r} is not an integer >= 1 (recall@k needs a whole k)")
    if len(set(ks)) != len(ks):
        raise ConfigError(f"{key}={list(ks)!r}: repeated k; give each k once")
    return list(ks)


def check_checkpoint(value, key: str) -> None:
    try:
        local_checkpoint(value, key)
    except CheckpointPathError as err:
        raise ConfigError(str(err)) from err


def _checkpoint_nodes(retrievers: Mapping | None) -> list[tuple[str, object]]:
    """(config key, value) of every ``ckpt_path`` in the retriever nodes."""
    # read from the node itself: a run name (a retriever's key) may hold dots, which a key path would split
    return [
        (f"retriever.{name}.ckpt_path", node.get("ckpt_path"))
        for name, node in (retrievers or {}).items()
        if isinstance(node, Mapping) and "ckpt_path" in node
    ]


def validate_eval_config(cfg: DictConfig) -> None:
    """Every ``eval.py`` setting that the job reads with a range: raises :class:`ConfigError` on the first bad one."""
    ks = check_ks(cfg)
    top_k = positive_int(cfg, "top_k", allow_none=True)
    if top_k is not None and top_k < max(ks):
        raise ConfigError(f"top_k={top_k}: must be null (the full ranking) or >= max(ks)={max(ks)}")
    positive_int(cfg, "n_boot")
    positive_int(cfg, "data.limit", allow_none=True)
    if not _is_int(OmegaConf.select(cfg, "seed")):
        raise ConfigError(f"seed={OmegaConf.select(cfg, 'seed')!r}: must be an integer")
    failures = OmegaConf.select(cfg, "max_llm_failures", default=None)
    if failures is not None and (not _is_int(failures) or failures < 0):
        raise ConfigError(f"max_llm_failures={failures!r}: must be null (no limit) or an integer >= 0")
    for key, value in _checkpoint_nodes(cfg.get("retriever")):
        check_checkpoint(value, key if value is not None else "ckpt_path")


def validate_train_config(cfg: DictConfig) -> None:
    """Every ``train.py`` setting that the job reads with a range: raises :class:`ConfigError` on the first bad one."""
    check_ks(cfg)
    positive_int(cfg, "n_boot")
    positive_int(cfg, "data.limit", allow_none=True)
    if not _is_int(OmegaConf.select(cfg, "seed")):
        raise ConfigError(f"seed={OmegaConf.select(cfg, 'seed')!r}: must be an integer")
    if cfg.get("ckpt_path") not in (None, "last"):  # last: the newest checkpoint of the run, if any
        check_checkpoint(cfg.ckpt_path, "ckpt_path")
