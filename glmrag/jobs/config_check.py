"""The command-line settings of ``train.py`` and ``eval.py``, checked once, before any work starts.

Hydra hands over whatever the user typed (``ks=[1.5]``, ``top_k=-5``, ``data.limit=0``); these checks turn
each such value into one :class:`ConfigError` that names the key, the value and what is allowed, instead of
a silently different run (``1.5`` read as recall@1) or a raw Python error minutes later. Checkpoint paths are
checked here too (set, local, existing): a remote one would be unpickled by Lightning with code execution.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from glmrag.io import CheckpointPathError, local_checkpoint
from glmrag.jobs.common import instantiate_datamodule, resolved_config_yaml, run_state
from glmrag.models.checkpointing import readable_checkpoint


class ConfigError(ValueError):
    """A setting outside its allowed range; the message names the key, the value and the range."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(cfg: DictConfig, key: str, allow_none: bool = False) -> int | None:
    """``cfg.<key>`` as an int >= 1 (or None when ``allow_none``); :class:`ConfigError` otherwise."""
    return checked_positive(OmegaConf.select(cfg, key), key, allow_none)


def checked_positive(value, key: str, allow_none: bool = False) -> int | None:
    """``value`` (the setting ``key``) as an int >= 1 (or None when ``allow_none``); :class:`ConfigError` otherwise."""
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
    """A local, whole checkpoint file (not a URL, not truncated by a kill): :class:`ConfigError` naming it."""
    try:
        readable_checkpoint(local_checkpoint(value, key), key)
    except CheckpointPathError as err:
        raise ConfigError(str(err)) from err


def check_init_from(cfg: DictConfig, init_from: str) -> None:
    """``model.init_from``: a whole checkpoint file (:func:`check_checkpoint`) and, for a GNN run, GNN weights of
    ``model.gnn``'s sizes, from a checkpoint of the module or a GFM-RAG checkpoint folder (``model.pth`` and
    ``config.json``): checked before any work (:func:`glmrag.models.gnn_module.init_weights`), not when the fit
    starts after the index build."""
    from glmrag.models.gnn_module import GNNRetrieverModule, init_weights
    from glmrag.models.retriever_module import typed_settings
    from glmrag.nn.gnn import GNNConfig

    target = OmegaConf.select(cfg, "model._target_")
    gnn_run = isinstance(target, str) and issubclass(get_class(target), GNNRetrieverModule)
    if not (gnn_run and Path(str(init_from)).expanduser().is_dir()):  # a GFM-RAG folder: init_weights reads it
        check_checkpoint(init_from, "model.init_from")
    if gnn_run:
        gnn = OmegaConf.to_container(cfg.model.gnn, resolve=True) if cfg.model.get("gnn") is not None else None
        init_weights(str(init_from), typed_settings(GNNConfig, gnn, "model.gnn"))


def check_gfmrag_folders(retrievers: Mapping | None) -> None:
    """Every GFM-RAG checkpoint folder of the retriever nodes (``folder`` of
    :class:`~glmrag.retrievers.gfmrag_checkpoint.GFMRAGCheckpointRetriever`) read and checked before the index is
    built (:func:`~glmrag.models.gfmrag_folder.read_gfmrag_folder`), its document ranker too."""
    from glmrag.models.gfmrag_folder import read_gfmrag_folder

    for name, node in (retrievers or {}).items():
        if isinstance(node, Mapping) and str(node.get("_target_", "")).endswith(".GFMRAGCheckpointRetriever"):
            folder = read_gfmrag_folder(node.get("folder"), f"retriever.{name}.folder")
            folder.document_ranker(node.get("ranker"), f"retriever.{name}.ranker")


def _checkpoint_nodes(retrievers: Mapping | None) -> list[tuple[str, object]]:
    """(config key, value) of every ``ckpt_path`` in the retriever nodes."""
    # read from the node itself: a run name (a retriever's key) may hold dots, which a key path would split
    return [
        (f"retriever.{name}.ckpt_path", node.get("ckpt_path"))
        for name, node in (retrievers or {}).items()
        if isinstance(node, Mapping) and "ckpt_path" in node
    ]


def _leaves(node, prefix: str = "") -> Iterator[tuple[str, object]]:
    """``(dotted key, value)`` of every leaf of a config, ``hydra`` and values that do not resolve yet skipped."""
    items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else enumerate(node)
    for key, _ in items:
        if prefix == "" and key == "hydra":
            continue
        try:
            value = node[key]
        except Exception:  # noqa: BLE001 (an interpolation of a resolver that only a running job has)
            continue
        if isinstance(value, DictConfig | ListConfig):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def check_finite(cfg: DictConfig) -> None:
    """No setting anywhere is NaN or infinite (``model.loss.bce_weight=nan`` trained on NaN and wrote a table of
    zeros; ``lr=inf`` likewise): the first such key is a :class:`ConfigError`."""
    for key, value in _leaves(cfg):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value!r}: must be a finite number")


def check_optimizer(cfg: DictConfig) -> None:
    """``model.optimizer`` built on one dummy parameter, so torch's own argument checks (``Invalid learning
    rate: -1.0``, betas outside [0, 1)) stop the job before the index and the data load, as a
    :class:`ConfigError` naming the node. ``lr`` 0 trains nothing, on purpose (the untrained twin of
    ``benchmarks/train_2wiki_cpu.sh``); NaN and infinity are :func:`check_finite`'s."""
    node = OmegaConf.select(cfg, "model.optimizer", default=None)
    if not isinstance(node, Mapping) or not isinstance(node.get("_target_"), str):
        return
    try:
        instantiate(node)([torch.nn.Parameter(torch.zeros(1))])
    except InstantiationException as err:
        raise ConfigError(f"model.optimizer: {err.__cause__ or err} ({node['_target_']})") from err
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model.optimizer: {err} ({node['_target_']})") from err


def check_datamodule(cfg: DictConfig) -> None:
    """The ``datamodule`` node built as the job builds it: its argument rules are the constructor's, written once
    there (``batch_size=0`` failed in a log format string after the index was built); building one reads no
    data. A ValueError or TypeError of the constructor is a :class:`ConfigError`."""
    node = cfg.get("datamodule")
    if not isinstance(node, Mapping) or not isinstance(node.get("_target_"), str):
        return
    try:
        instantiate_datamodule(cfg)
    except InstantiationException as err:
        if not isinstance(err.__cause__, TypeError | ValueError):
            raise
        raise ConfigError(f"{err.__cause__} (datamodule._target_ {node['_target_']})") from err


def check_model(cfg: DictConfig) -> None:
    """Every settings node of the model as its module builds it (:func:`check_model_settings`): the range
    rules live on the settings dataclasses (sizes and sanity bounds on :class:`~glmrag.nn.gnn.GNNConfig`,
    budgets on :class:`~glmrag.datamodules.glm_inputs.SubgraphSettings`, loss weights on
    :class:`~glmrag.models.retriever_module.LossWeights`, ...), written once there."""
    check_model_settings(cfg)


def check_model_settings(cfg: DictConfig) -> None:
    """Each settings node of ``model`` (``model.gnn``, ``model.subgraph``, ...) converted as the module's
    ``SETTINGS`` converts it, before any work starts: an unknown key or a value out of range is a
    :class:`ConfigError`."""
    model = cfg.get("model")
    if not isinstance(model, Mapping) or not isinstance(model.get("_target_"), str):
        return
    module = get_class(model["_target_"])
    for name, convert in getattr(module, "SETTINGS", {}).items():
        node = model.get(name)
        try:
            convert(OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{err} (model._target_ {model['_target_']})") from err


def check_epochs(cfg: DictConfig) -> None:
    """``trainer.max_epochs`` >= 1, or -1 / null with ``trainer.max_steps`` >= 1 (Lightning's step budget)."""
    epochs, steps = OmegaConf.select(cfg, "trainer.max_epochs"), OmegaConf.select(cfg, "trainer.max_steps")
    if epochs in (None, -1) and _is_int(steps) and steps >= 1:
        return
    if not _is_int(epochs) or epochs < 1:
        raise ConfigError(
            f"trainer.max_epochs={epochs!r}: must be an integer >= 1 (or -1 with trainer.max_steps >= 1); "
            "with 0 nothing is trained"
        )


def check_held_out(cfg: DictConfig) -> None:
    """No split the run trains or selects on is one it tests or evaluates on, for a dataset it trains on."""
    seen = {OmegaConf.select(cfg, f"datamodule.{key}"): key for key in ("train_split", "val_split")}
    trained = set(OmegaConf.select(cfg, "datamodule.datasets") or [])
    scored = {}
    if cfg.get("test"):
        scored[OmegaConf.select(cfg, "datamodule.test_split")] = "datamodule.test_split"
    if cfg.get("evaluate") and trained & set(cfg.get("eval_data") or [cfg.data.name]):
        scored[cfg.get("eval_split")] = "eval_split"
    for split, key in seen.items():
        if split is not None and split in scored:
            raise ConfigError(
                f"datamodule.{key}={split!r} is also the run's {scored[split]}: it would be scored on questions it "
                f"trained or selected on; train on another split (e.g. datamodule.{key}="
                f"{'train' if key == 'train_split' else 'validation'})"
            )


RESUME_MAY_CHANGE = (
    "trainer.max_epochs",
    "trainer.max_steps",
    "trainer.max_time",
    "trainer.enable_progress_bar",
    "trainer.default_root_dir",
    "ckpt_path",
    "model.init_from",
    "logger",
    "callbacks",
    "run_name",
    "run_id",
    "output_dir",
    "checkpoint_dir",
    "results_dir",
    "study",
    "quiet",
    "test",
    "evaluate",
    "evaluate_untrained",
    "eval_data",
    "eval_split",
    "baselines",
    "ks",
    "n_boot",
    "allow_train_overlap",
    "strict_overlap",
)
"""The keys (and nodes) a resumed run may set otherwise than the run it resumes: how long it trains, where it
writes, logs and checkpoints (the callbacks observe the training), and what is reported after training; the
weights come from the checkpoint, not ``model.init_from``. Any other difference is refused
(:func:`check_resume_config`)."""


def check_resume_config(cfg: DictConfig, ckpt_path: str) -> None:
    """Raise :class:`ConfigError` when ``cfg`` differs from the config saved in the
    checkpoint it resumes in a key a resume may not change (:data:`RESUME_MAY_CHANGE`), naming each key with its
    two values; a checkpoint that saved no config is refused too, since nothing could be checked."""
    saved = run_state(ckpt_path).get("config")
    if not isinstance(saved, str):
        raise ConfigError(
            f"ckpt_path={ckpt_path}: the checkpoint records no run config, so a resume cannot be checked against "
            "it; start a new run and pass it as model.init_from=<checkpoint> to begin from its weights"
        )
    before, now = (dict(_leaves(OmegaConf.create(text))) for text in (saved, resolved_config_yaml(cfg)))
    differ = [
        f"{key}: {before.get(key, '<unset>')!r} in the checkpoint, {now.get(key, '<unset>')!r} now"
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key) and not any(key == k or key.startswith(f"{k}.") for k in RESUME_MAY_CHANGE)
    ]
    if differ:
        raise ConfigError(
            f"ckpt_path={ckpt_path}: a resume must train what the checkpoint trained, but "
            + "; ".join(differ)
            + ". Resume with the checkpoint's values, or start a new run (no ckpt_path; model.init_from=<checkpoint>"
            " begins from its weights). A resume may change only: " + ", ".join(RESUME_MAY_CHANGE)
        )


def validate_eval_config(cfg: DictConfig) -> None:
    """Every ``eval.py`` setting that the job reads with a range: raises :class:`ConfigError` on the first bad one."""
    check_finite(cfg)
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
    check_gfmrag_folders(cfg.get("retriever"))
    for name, node in (cfg.get("retriever") or {}).items():
        if isinstance(node, Mapping) and node.get("top_entities") is not None:
            checked_positive(node.get("top_entities"), f"retriever.{name}.top_entities")


def validate_train_config(cfg: DictConfig) -> None:
    """Every ``train.py`` setting that the job reads with a range: raises :class:`ConfigError` on the first bad one."""
    check_finite(cfg)
    check_ks(cfg)
    positive_int(cfg, "n_boot")
    positive_int(cfg, "data.limit", allow_none=True)
    if not _is_int(OmegaConf.select(cfg, "seed")):
        raise ConfigError(f"seed={OmegaConf.select(cfg, 'seed')!r}: must be an integer")
    if cfg.get("ckpt_path") not in (None, "last"):  # last: the newest checkpoint of the run, if any
        check_checkpoint(cfg.ckpt_path, "ckpt_path")
    if init_from := OmegaConf.select(cfg, "model.init_from", default=None):
        if cfg.get("pretrain") and cfg.get("ckpt_path") is None:  # the stage's checkpoint would start the fit
            raise ConfigError(
                f"model.init_from={init_from} and a pretrain stage: the fine-tuning would start from the KG-completion "
                "checkpoint instead; add pretrain=null to start from model.init_from"
            )
        check_init_from(cfg, init_from)
    check_epochs(cfg)
    check_optimizer(cfg)
    check_datamodule(cfg)
    check_model(cfg)
    check_held_out(cfg)
