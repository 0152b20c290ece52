"""The Python API: a dataset, its index, retrievers and a results table in four calls, no Hydra; training in one.

>>> import glmrag
>>> data = glmrag.load_data("toy")                              # or format="hotpotqa", questions="dev.json"
>>> index = glmrag.build_index(data)                            # cached on disk, like eval.py's
>>> print(glmrag.evaluate_systems(["dense", "ppr"], data, index).to_markdown())
>>> glmrag.retrieve(glmrag.get_retriever("ppr"), ["Who founded X?"], index, data)   # your own questions
>>> run = glmrag.train(["experiment=demo_2wiki"])               # = python train.py experiment=demo_2wiki

Each call makes the evaluation job's (:mod:`glmrag.jobs.evaluate`) choices: the same registry, index cache,
retriever configs (``configs/retriever/<name>.yaml``) and evaluator, so a table here equals ``eval.py``'s;
:func:`train` runs the training job of ``train.py`` (:func:`glmrag.jobs.train.run_train`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from glmrag.data.files import load_files, register_files
from glmrag.data.registry import DATASETS, load_dataset
from glmrag.data.types import Dataset, Question
from glmrag.eval import EvalResult, evaluate, format_markdown
from glmrag.eval.overlap import seen_questions
from glmrag.eval.timing import timed_retrieve
from glmrag.index.cache import get_index
from glmrag.index.embed import Embedder
from glmrag.index.kg import KGIndex
from glmrag.io import cache_root
from glmrag.jobs.common import compose_config
from glmrag.jobs.config_check import ConfigError, validate_eval_config
from glmrag.jobs.config_path import config_dir, override_key
from glmrag.retrievers.base import Ranking, Retriever

__all__ = ["Table", "TrainedRun", "build_index", "evaluate_systems", "get_retriever", "load_data", "retrieve", "train"]


def load_data(
    name: str = "musique100",
    *,
    format: str | None = None,
    questions: str | Path | None = None,
    corpus: str | Path | None = None,
    openie: str | Path | None = None,
    split: str | None = None,
    limit: int | None = None,
    root: str | None = None,
) -> Dataset:
    """A registered dataset (``"musique100"``, ``"toy"``, ``"2wiki_test"``, ...) or your own files.

    With ``format`` (``hipporag``, ``musique``, ``hotpotqa``, ``2wiki``, ``linearrag``,
    ``gfmrag``, ``plain``; paths as in :mod:`glmrag.data.files`) the files are read and
    registered under ``name``, so the index cache and ``eval.py data.name=...`` know them.
    ``split`` / ``limit`` select questions as :func:`glmrag.data.registry.load_dataset` does;
    the corpus is always whole.
    """
    if format is not None:
        if name == "musique100":
            name = "files"
        register_files(name, format, questions, corpus, openie)
    return load_dataset(name, split=split, limit=limit, root=root)


def build_index(
    dataset: Dataset,
    *,
    extractor: str | None = None,
    cache_dir: str | Path | None = None,
    rebuild: bool = False,
    **settings: Any,
) -> KGIndex:
    """The KG index of ``dataset``'s whole corpus, built once and cached on disk.

    ``extractor``: ``openie`` (the dataset's OpenIE file), ``spacy`` (offline) or ``llm``;
    default: ``openie`` when the dataset ships a file, else ``spacy``. ``settings`` override
    ``configs/index/default.yaml`` (``embed_model``, ``synonym_threshold``, ...); an unknown
    key is an error. The index covers every question of the dataset's registered files, so
    the splits of one dataset share it.
    """
    defaults = OmegaConf.load(config_dir() / "index" / "default.yaml")
    unknown = sorted(set(settings) - set(defaults))
    if unknown:
        raise TypeError(f"build_index got unknown settings {unknown}; known: {sorted(defaults)}")
    node = OmegaConf.merge(
        defaults,
        {
            "cache_dir": str(cache_dir or cache_root() / "indexes"),
            "extractor": extractor or ("openie" if dataset.openie_path else "spacy"),
            "rebuild": rebuild,
        },
        settings,
    )
    full = load_dataset(dataset.name) if dataset.name in DATASETS else dataset
    return get_index(full, node)


def get_retriever(name_or_checkpoint: str | Path, **kwargs: Any) -> Retriever:
    """A retriever by config name (``dense``, ``ppr``, ``hyperaddress``, ... as in ``configs/retriever/``)
    or from a checkpoint file written by ``train.py`` (a path ending in ``.ckpt``).

    ``kwargs`` override the config's arguments (``get_retriever("ppr", damping=0.85)``).
    """
    target = str(name_or_checkpoint)
    if target.endswith(".ckpt"):
        node = OmegaConf.create(
            {"_target_": "glmrag.retrievers.checkpoint.CheckpointRetriever", "ckpt_path": target} | kwargs
        )
    else:
        path = config_dir() / "retriever" / f"{target}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in path.parent.glob("*.yaml"))
            raise ValueError(f"no retriever config {target!r}; known: {', '.join(known)} (or a path to a .ckpt)")
        node = OmegaConf.merge(OmegaConf.load(path)[target], kwargs)
    retriever = hydra.utils.instantiate(node)
    if not isinstance(retriever, Retriever):
        raise TypeError(f"{target} built a {type(retriever).__name__}, which is not a glmrag Retriever")
    return retriever


def as_questions(questions: Sequence[str | Question] | Dataset) -> list[Question]:
    """Question objects: a dataset's, or plain strings given ids ``q0``, ``q1``, ... and no gold."""
    if isinstance(questions, Dataset):
        return list(questions.qa)
    return [q if isinstance(q, Question) else Question(f"q{i}", q, (), ()) for i, q in enumerate(questions)]


def retrieve(
    retriever: Retriever | str,
    questions: Sequence[str | Question] | Dataset,
    index: KGIndex,
    dataset: Dataset,
    top_k: int = 10,
) -> list[Ranking]:
    """The ``top_k`` passages for each question (strings, :class:`Question` objects, or a dataset's).

    Look a passage up with ``dataset.corpus[dataset.corpus.position(pid)]``.
    """
    if isinstance(retriever, str):
        retriever = get_retriever(retriever)
    return retriever.retrieve(as_questions(questions), index, dataset.corpus, top_k=top_k)


@dataclass
class Table:
    """The evaluator's result as a table: one row per system, metrics as fractions in ``[0, 1]``."""

    result: EvalResult
    """Everything the evaluator measured, with ``setup_seconds`` and ``ms_per_question`` of each system."""

    @property
    def rows(self) -> list[dict[str, Any]]:
        """``{"system": name, metric: mean, ...}`` per system (metrics without gold left out)."""
        return [{"system": s} | {m: iv.mean for m, iv in self.result.overall[s].items()} for s in self.result.systems]

    def __getitem__(self, system: str) -> dict[str, float]:
        return {m: iv.mean for m, iv in self.result.overall[system].items()}

    def to_markdown(self) -> str:
        """The Markdown report ``eval.py`` prints and writes as ``results.md``."""
        return format_markdown(self.result)


def evaluate_systems(
    systems: Sequence[str] | Mapping[str, Retriever | str],
    dataset: Dataset,
    index: KGIndex | None = None,
    *,
    ks: Sequence[int] = (1, 2, 5, 10),
    reference: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    top_k: int | None = None,
    allow_train_overlap: bool = False,
    strict_overlap: bool = False,
) -> Table:
    """Rank ``dataset``'s questions with each system and evaluate them together (paired CIs and tests), as
    ``eval.py`` does: the same training-overlap guard and the same metrics.

    ``systems``: config names or ``.ckpt`` paths, or a mapping ``{label: retriever, config name or path}``. The
    first system is the reference of the significance tests unless ``reference`` names one.
    ``index`` defaults to :func:`build_index` of the dataset. ``top_k``: passages ranked per question, None
    (as ``eval.py``) every passage, so MRR is the full ranking's; a cut MRR is labelled ``MRR@k``. A checkpoint
    that trained or validated on some of the questions raises ``ValueError`` unless ``allow_train_overlap``
    (then its row is flagged); one that records no questions is flagged, or refused with ``strict_overlap``
    (:func:`glmrag.eval.overlap.seen_questions`). The settings go through ``eval.py``'s check
    (:func:`~glmrag.jobs.config_check.validate_eval_config`): a bad one is the same ``ConfigError``, before any
    work; so is an ``index`` built from another corpus.
    """
    if isinstance(systems, str | Path):
        systems = [systems]
    named = dict(systems) if isinstance(systems, Mapping) else {str(s): s for s in systems}
    if not named:
        raise ConfigError("evaluate_systems needs at least one system")
    settings = {"ks": list(ks), "top_k": top_k, "n_boot": n_boot, "seed": seed, "output_dir": "unused"}
    validate_eval_config(OmegaConf.merge(compose_config("eval"), settings))
    if index is not None and set(index.passage_ids) != set(dataset.corpus.ids):
        raise ConfigError(
            f"index: built from another corpus ({index.num_passages} passages) than dataset {dataset.name!r} "
            f"({len(dataset.corpus)} passages); pass the dataset's own index, glmrag.build_index(dataset)"
        )
    questions = list(dataset.qa)
    checkpoints = {label: {"ckpt_path": path} for label, path in _checkpoint_paths(named).items()}
    overlap, unchecked = seen_questions(questions, checkpoints, allow_train_overlap, strict_overlap)  # before work
    index = build_index(dataset) if index is None else index
    depth = len(dataset.corpus) if top_k is None else top_k
    rankings, setup, ms = {}, {}, {}
    for label, system in named.items():
        retriever = get_retriever(system) if isinstance(system, str | Path) else system
        rankings[label], setup[label], ms[label] = timed_retrieve(retriever, questions, index, dataset.corpus, depth)
    embed_model = index.manifest.get("settings", {}).get("embed_model")
    question_embeddings = None
    if index.entity_embeddings is not None and embed_model:  # the entity-cosine analysis, as eval.py gives it
        question_embeddings = Embedder(embed_model).encode([q.question for q in questions])
    result = evaluate(
        rankings,
        questions,
        index,
        ks=tuple(ks),
        reference=reference or next(iter(named)),
        question_embeddings=question_embeddings,
        n_boot=n_boot,
        seed=seed,
    )
    result.ms_per_question, result.setup_seconds = ms, setup
    result.train_overlap, result.overlap_unchecked = overlap, unchecked
    result.ranking_depth = None if depth >= len(dataset.corpus) else depth
    return Table(result)


def _checkpoint_paths(systems: Mapping[str, Retriever | str | Path]) -> dict[str, str]:
    """Label -> checkpoint path of the systems that are (or were built from) a checkpoint."""
    out = {}
    for label, system in systems.items():
        if isinstance(system, str | Path) and str(system).endswith(".ckpt"):
            out[label] = str(system)
        elif getattr(system, "ckpt_path", None):
            out[label] = str(system.ckpt_path)
    return out


@dataclass
class TrainedRun:
    """What :func:`train` returns: the run's folders, its best checkpoint and its metrics."""

    run_name: str
    output_dir: Path
    """Logs, training curves and the evaluation's files (``eval/``)."""
    checkpoint_dir: Path
    best_checkpoint: Path | None
    """The best epoch's checkpoint by ``val/recall@2`` (None for a ``fast_dev_run``)."""
    metrics: dict[str, float]
    """The Trainer's final metrics (``val/...``, ``test/...``) and the untrained model's (``start/...``)."""
    evals: dict[str, EvalResult]
    """The evaluator's result per evaluated dataset (empty with ``evaluate=false``)."""
    warnings: list[str]
    stored: list[Path]
    """The run's folders in the results store."""


def train(overrides: Sequence[str] = (), config: DictConfig | None = None) -> TrainedRun:
    """Run the training job of ``python train.py <overrides>`` (or of a composed ``config``): the same checks,
    training, test, evaluation against the baselines and results store. Outputs go to ``output_dir`` (default
    ``outputs/train/<run>/<time>``, as ``train.py``'s Hydra folder) and ``checkpoint_dir``."""
    from glmrag.jobs.config_path import run_suffix
    from glmrag.jobs.train import run_train

    cfg = config if config is not None else compose_config("train", overrides)
    keys = {override_key(o) for o in overrides}
    if "run_name" not in keys and config is None:
        cfg.run_name = f"{cfg.model_name}-{cfg.data.name}{run_suffix(list(overrides))}"  # as train.py names it
    if "output_dir" not in keys and config is None:
        cfg.output_dir = f"outputs/train/{cfg.run_name}/{datetime.now():%Y-%m-%d_%H-%M-%S}"
    out = run_train(cfg)
    best = out["best_checkpoint"]
    return TrainedRun(
        run_name=str(cfg.run_name),
        output_dir=Path(cfg.output_dir),
        checkpoint_dir=Path(best).parent if best else Path(str(cfg.checkpoint_dir)),
        best_checkpoint=Path(best) if best else None,
        metrics=dict(out["metrics"]),
        evals=dict(out["evals"]),
        warnings=list(out["warnings"]),
        stored=[Path(p) for p in out["stored"]],
    )


__all__ += ["as_questions", "compose_config", "load_files"]  # compose_config: glmrag.jobs.common
