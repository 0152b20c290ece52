"""GNN inputs (relation features, question embeddings), cached on disk next to the indexes.

:class:`~glmrag.datamodules.gnn_datamodule.KGQADataModule` and the GNN checkpoint retriever
(:mod:`glmrag.retrievers.checkpoint`) share these files, keyed by what built them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from glmrag.data.types import Corpus, Question
from glmrag.index.embed import DEFAULT_MODEL, Embedder, passage_matrix
from glmrag.index.kg import KGIndex
from glmrag.index.store import content_manifest
from glmrag.io import cache_root, load_cached_tensors, write_cache_tensors
from glmrag.nn.graph_inputs import GraphInputs, graph_inputs

INPUTS_FORMAT = 2
"""Version of the cached GNN-input files; bump it when their content changes (2: checksummed, :mod:`glmrag.io`)."""


def default_inputs_cache_dir() -> str:
    """``$GLMRAG_CACHE_DIR/gnn_inputs``: where the DataModule and the checkpoint retriever share GNN inputs."""
    return str(cache_root() / "gnn_inputs")


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([INPUTS_FORMAT, *parts], sort_keys=True, default=str).encode()).hexdigest()[:12]


def _load_or_compute(path: Path | None, compute) -> dict[str, Any]:
    """``compute()`` (a dict of tensors, lists, numbers), read from ``path`` when there and intact, else written there.

    A damaged file (truncated, edited, or without the checksum header) fails its checksum and is rebuilt with a
    warning naming it (:func:`glmrag.io.load_cached_tensors`); it is loaded weights-only, so it cannot run code.
    """
    if path is not None:
        cached = load_cached_tensors(path)  # None when missing or not intact
        if cached is not None:
            return cached
    value = compute()
    if path is not None:
        write_cache_tensors(path, value)
    return value


def cached_graph_inputs(
    index: KGIndex, embed_model: str = DEFAULT_MODEL, node_features: bool = False, cache_dir: str | None = None
) -> GraphInputs:
    """:func:`glmrag.nn.graph_inputs.graph_inputs` of ``index``, cached in ``cache_dir`` (None: no disk cache).

    Embedding the relation names is the slow part (minutes for musique100's
    5k relations on a busy CPU). The file name hashes the index manifest (which
    records what built it and when), the embedding model and ``node_features``,
    so a rebuilt index never reads stale inputs.
    """
    key = _key(content_manifest(index.manifest), embed_model, node_features)
    path = Path(cache_dir) / f"graph-{key}.cache" if cache_dir else None

    def compute() -> dict[str, Any]:
        graph = graph_inputs(index, Embedder(embed_model), node_features=node_features)
        return {f.name: getattr(graph, f.name) for f in fields(graph)}

    return GraphInputs(**_load_or_compute(path, compute))


def cached_question_embeddings(
    questions: Sequence[Question], embed_model: str = DEFAULT_MODEL, cache_dir: str | None = None
) -> dict[str, torch.Tensor]:
    """Question id -> (d,) sentence embedding of its text, cached in ``cache_dir`` (None: no disk cache)."""
    ids, texts = [q.id for q in questions], [q.question for q in questions]
    path = Path(cache_dir) / f"questions-{_key(ids, texts, embed_model)}.cache" if cache_dir else None

    def compute() -> dict[str, Any]:
        return {"ids": ids, "emb": torch.from_numpy(Embedder(embed_model).encode(texts))}

    cached = _load_or_compute(path, compute)
    return dict(zip(cached["ids"], cached["emb"], strict=True))


def cached_passage_embeddings(corpus: Corpus, index: KGIndex, embed_model: str = DEFAULT_MODEL) -> torch.Tensor:
    """Unit sentence embeddings of the passages, in the index's passage order (a prior's dense term,
    :mod:`glmrag.nn.prior`): the dense retriever's, from the same file (``$GLMRAG_CACHE_DIR/embeddings``).

    Shapes: -> (P, d) float32.
    """
    if [p.id for p in corpus] != list(index.passage_ids):
        raise ValueError(
            f"the corpus ({len(corpus)} passages) is not the index's ({index.num_passages}) in the same order: "
            "embed the corpus the index was built from"
        )
    matrix = passage_matrix(
        corpus, Embedder(embed_model), cache_root() / "embeddings", "dense prior: passage embedding"
    )
    return torch.from_numpy(matrix)
