"""Indexes cached on disk, keyed by everything that decides their content.

Shared by the evaluation job and the training DataModules, so both read the
same index of a dataset.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from glmrag.data.types import Dataset, check_dataset_name
from glmrag.index import extractors  # each extractor imported on first use: spaCy only for index.extractor=spacy
from glmrag.index.build import IndexSettings, expected_manifest
from glmrag.index.embed import Embedder
from glmrag.index.extractors.base import Extractor
from glmrag.index.kg import KGIndex
from glmrag.index.store import load_or_build
from glmrag.llm.base import LLM, build_llm

log = logging.getLogger(__name__)


PASSAGES_PER_PROCESS = 1000
"""Passages per spaCy worker process when the count is automatic: a worker costs a model load (seconds), so a
small corpus runs in one process (engineering choice, not from a paper)."""


def spacy_processes_for(passages: int) -> int:
    """One spaCy process per :data:`PASSAGES_PER_PROCESS` passages, at least one, at most one per usable core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, passages // PASSAGES_PER_PROCESS))


def make_extractor(
    kind: str,
    dataset: Dataset,
    spacy_processes: int | None = 1,
    llm: LLM | Mapping | None = None,
    llm_openie: Mapping | None = None,
) -> Extractor:
    """``openie``: the dataset's own HippoRAG OpenIE file; ``spacy``: the offline extractor; ``llm``: LLM OpenIE.

    For ``llm``, ``llm`` is the index config's ``llm`` mapping (built with :func:`~glmrag.llm.base.build_llm`)
    or an :class:`~glmrag.llm.base.LLM` already built, and ``llm_openie`` the keyword arguments of
    :class:`~glmrag.index.extractors.llm_openie.LLMOpenIEExtractor` (``cache_dir``, ``batch_size``, ...).
    """
    if kind == "openie":
        if dataset.openie_path is None:
            raise ValueError(
                f"dataset {dataset.name} ships no OpenIE file; use index.extractor=spacy "
                "(or point an OpenIEImportExtractor at a HippoRAG openie_*.json)"
            )
        return extractors.OpenIEImportExtractor(dataset.openie_path)
    if kind == "spacy":
        processes = spacy_processes_for(len(dataset.corpus)) if spacy_processes is None else spacy_processes
        return extractors.SpacyExtractor(n_process=processes)
    if kind == "llm":
        if llm is None:
            raise ValueError(
                f"index.extractor=llm for dataset {dataset.name}, but the index config has no llm node; "
                "use index=llm_openie (configs/index/llm_openie.yaml) or add one, e.g. +llm@index.llm=local"
            )
        llm = build_llm(llm)
        options = dict(llm_openie or {})
        return extractors.LLMOpenIEExtractor(llm, **options)
    raise ValueError(f"unknown index.extractor {kind!r}; expected 'openie', 'spacy' or 'llm'")


def index_settings(cfg: Mapping) -> IndexSettings:
    """The :class:`IndexSettings` of an index config: every field the config sets, the defaults for the rest."""
    return IndexSettings(**{f.name: cfg[f.name] for f in fields(IndexSettings) if f.name in cfg})


_READY: set[Path] = set()
"""Index folders already reported ready in this process (the job and its DataModules share an index)."""


@dataclass
class IndexRequest:
    """An index config applied to a dataset: where its index is cached and what builds it."""

    folder: Path
    """``<cache_dir>/<dataset>-<extractor>-<hash of everything that decides the index>``."""
    extractor: Extractor
    settings: IndexSettings
    embedder: Embedder | None
    """Of ``settings.embed_model`` with the config's phrase cache (``embed_cache_dir``); None without a model."""


def index_request(dataset: Dataset, cfg: Mapping) -> IndexRequest:
    """The cache folder, extractor, settings and embedder of ``dataset``'s index under the index config ``cfg``.

    The folder name carries a hash of everything that decides the index, so
    ablations over index settings coexist.
    """
    extractor = make_extractor(
        cfg["extractor"], dataset, cfg.get("spacy_processes", 1), cfg.get("llm"), cfg.get("llm_openie")
    )
    settings = index_settings(cfg)
    expect = expected_manifest(dataset.corpus, dataset.qa, extractor, settings)
    key = hashlib.sha256(json.dumps(expect, sort_keys=True).encode()).hexdigest()[:10]
    root = Path(cfg["cache_dir"]).expanduser()
    folder = root / f"{check_dataset_name(dataset.name, 'the dataset name')}-{extractor.name}-{key}"
    cache_dir = cfg.get("embed_cache_dir")
    embedder = Embedder(settings.embed_model, cache_dir=cache_dir) if settings.embed_model else None
    return IndexRequest(folder, extractor, settings, embedder)


def get_index(dataset: Dataset, cfg: Mapping, build: Callable[[IndexRequest], KGIndex] | None = None) -> KGIndex:
    """The index of the whole dataset (all questions, so every split shares it), cached on disk
    (:func:`index_request`); a stale or corrupt folder is rebuilt.

    ``build``: make the index this way and store it, whatever the folder holds (the merge of a sharded build,
    :mod:`glmrag.jobs.index`); None: load it, or build it on this machine when missing or stale.
    """
    request = index_request(dataset, cfg)
    folder = request.folder
    start = time.perf_counter()
    index = load_or_build(
        folder,
        dataset.corpus,
        dataset.qa,
        request.extractor,
        request.embedder,
        request.settings,
        rebuild=True if cfg.get("rebuild") or build is not None else None,
        lock_timeout=cfg.get("lock_timeout"),
        build=(lambda: build(request)) if build is not None else None,
    )
    level = logging.DEBUG if folder in _READY else logging.INFO
    _READY.add(folder)
    log.log(level, "index %s ready in %.1fs: %s", folder, time.perf_counter() - start, index.manifest.get("counts"))
    return index
