"""The evaluation job: dataset -> cached KG index -> retrievers -> evaluator -> reports.

This is the one place that wires the layers together from a Hydra config
(``configs/eval.yaml``); ``eval.py`` is a thin wrapper around :func:`run_eval`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from glmrag.data.registry import load_dataset
from glmrag.data.types import Dataset
from glmrag.eval import EvalResult, evaluate, format_markdown, write_outputs
from glmrag.index.build import IndexSettings, expected_manifest
from glmrag.index.embed import Embedder
from glmrag.index.extractors.base import Extractor
from glmrag.index.extractors.openie_import import OpenIEImportExtractor
from glmrag.index.extractors.spacy_extractor import SpacyExtractor
from glmrag.index.kg import KGIndex
from glmrag.index.store import load_or_build
from glmrag.retrievers.base import Ranking, Retriever

log = logging.getLogger(__name__)

CACHE_ENV = "GLMRAG_CACHE_DIR"


def cache_root() -> Path:
    """``$GLMRAG_CACHE_DIR`` or ``~/.cache/glmrag``: where indexes and embeddings are cached."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "glmrag").expanduser()


# Configs name cache folders as ${glmrag_cache:embeddings}, resolved when the job runs.
if not OmegaConf.has_resolver("glmrag_cache"):
    OmegaConf.register_new_resolver("glmrag_cache", lambda sub="": str(cache_root() / sub))


def make_extractor(kind: str, dataset: Dataset, spacy_processes: int = 1) -> Extractor:
    """``openie``: the dataset's own HippoRAG OpenIE file; ``spacy``: the offline extractor."""
    if kind == "openie":
        if dataset.openie_path is None:
            raise ValueError(
                f"dataset {dataset.name} ships no OpenIE file; use index.extractor=spacy "
                "(or point an OpenIEImportExtractor at a HippoRAG openie_*.json)"
            )
        return OpenIEImportExtractor(dataset.openie_path)
    if kind == "spacy":
        return SpacyExtractor(n_process=spacy_processes)
    raise ValueError(f"unknown index.extractor {kind!r}; expected 'openie' or 'spacy'")


def index_settings(cfg: DictConfig) -> IndexSettings:
    return IndexSettings(
        synonym_threshold=cfg.synonym_threshold,
        synonym_top_k=cfg.synonym_top_k,
        embed_model=cfg.embed_model,
    )


def get_index(dataset: Dataset, cfg: DictConfig) -> KGIndex:
    """The index of the whole dataset (all questions, so every split shares it), cached on disk.

    The folder name carries a hash of everything that decides the index, so
    ablations over index settings coexist; a stale or corrupt folder is rebuilt.
    """
    extractor = make_extractor(cfg.extractor, dataset, cfg.get("spacy_processes", 1))
    settings = index_settings(cfg)
    expect = expected_manifest(dataset.corpus, dataset.qa, extractor, settings)
    key = hashlib.sha256(json.dumps(expect, sort_keys=True).encode()).hexdigest()[:10]
    root = Path(cfg.cache_dir).expanduser()
    folder = root / f"{dataset.name}-{extractor.name}-{key}"
    embedder = Embedder(settings.embed_model) if settings.embed_model else None
    start = time.perf_counter()
    index = load_or_build(
        folder, dataset.corpus, dataset.qa, extractor, embedder, settings, rebuild=True if cfg.rebuild else None
    )
    log.info("index %s ready in %.1fs: %s", folder, time.perf_counter() - start, index.manifest.get("counts"))
    return index


def make_retrievers(cfg: DictConfig) -> dict[str, Retriever]:
    """One retriever per entry of ``cfg.retriever``, named by its key (``dense``, ``ppr``, ...)."""
    retrievers = {name: hydra.utils.instantiate(node) for name, node in cfg.items()}
    for name, r in retrievers.items():
        if not isinstance(r, Retriever):
            raise TypeError(
                f"retriever {name} ({type(r).__name__}) does not implement glmrag.retrievers.base.Retriever"
            )
    return retrievers


def run_eval(cfg: DictConfig) -> EvalResult:
    """Rank the questions of ``cfg.data`` with every retriever in ``cfg.retriever`` and evaluate them together."""
    full = load_dataset(cfg.data.name, root=cfg.data.root)
    dataset = load_dataset(cfg.data.name, split=cfg.data.split, limit=cfg.data.limit, root=cfg.data.root)
    log.info(
        "%s: %d questions, %d passages; %s",
        dataset.name,
        len(dataset.qa),
        len(dataset.corpus),
        dataset.report.summary(),
    )
    index = get_index(full, cfg.index)
    questions = list(dataset.qa)

    rankings: dict[str, list[Ranking]] = {}
    for name, retriever in make_retrievers(cfg.retriever).items():
        start = time.perf_counter()
        rankings[name] = retriever.retrieve(questions, index, dataset.corpus, top_k=max(cfg.top_k, max(cfg.ks)))
        log.info("%s: %.1f ms per question", name, 1000 * (time.perf_counter() - start) / max(len(questions), 1))

    question_embeddings = None
    if index.entity_embeddings is not None and cfg.index.embed_model:
        question_embeddings = Embedder(cfg.index.embed_model).encode([q.question for q in questions])
    result = evaluate(
        rankings,
        questions,
        index,
        ks=tuple(cfg.ks),
        reference=cfg.reference or next(iter(rankings)),
        question_embeddings=question_embeddings,
        n_boot=cfg.n_boot,
        seed=cfg.seed,
    )
    result.settings["config"] = OmegaConf.to_container(cfg, resolve=True)
    paths = write_outputs(result, cfg.output_dir)
    print(format_markdown(result))
    print(f"\nwritten: {', '.join(str(p) for p in paths.values())}")
    return result
