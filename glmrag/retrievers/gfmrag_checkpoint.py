"""GFM-RAG's released retriever (a folder with ``model.pth`` and ``config.json``, e.g. ``rmanluo/GFM-RAG-8M``)
as a retriever of the shared evaluator.

:class:`GFMRAGCheckpointRetriever` reads the folder (:func:`~glmrag.models.gfmrag_folder.read_gfmrag_folder`),
builds a :class:`~glmrag.models.gnn_module.GNNRetrieverModule` of its sizes with its weights, and ranks as a
:class:`~glmrag.retrievers.checkpoint.CheckpointRetriever` ranks (the module's ``question_batch`` and ``rank``).
What differs is the graph the module reads, GFM-RAG's (:func:`~glmrag.nn.gfmrag_weights.gfmrag_graph_inputs`):
glmrag's edges reversed and relation features of the texts ``<r>`` and ``inverse_<r>``, embedded, as the questions
are, by the encoder ``config.json`` names (``text_emb_model_config.text_emb_model_name``: all-mpnet-base-v2 for
GFM-RAG-8M). The KG itself (entities, triples, question entity links) is glmrag's index, not GFM-RAG's.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from glmrag.data.types import Corpus
from glmrag.index.embed import Embedder
from glmrag.index.kg import KGIndex
from glmrag.index.store import content_manifest
from glmrag.io import load_cached_tensors, write_cache_tensors
from glmrag.models.gfmrag_folder import CONFIG_FILE, read_gfmrag_folder
from glmrag.models.gnn_module import GNNRetrieverModule
from glmrag.nn.gfmrag_weights import gfmrag_graph_inputs
from glmrag.nn.graph_inputs import GraphInputs
from glmrag.retrievers.checkpoint import IndexKG, ModuleRetriever

log = logging.getLogger(__name__)

GRAPH_FORMAT = 1
"""Version of the cached GFM-RAG graph files; bump it when their content changes."""


def cached_gfmrag_graph(index: KGIndex, embed_model: str, cache_dir: str | None) -> GraphInputs:
    """:func:`~glmrag.nn.gfmrag_weights.gfmrag_graph_inputs` of ``index`` by ``embed_model``, cached in
    ``cache_dir`` (None: no disk cache) under a hash of the index manifest and the encoder, as glmrag's own graph
    inputs are (:func:`glmrag.datamodules.gnn_input_cache.cached_graph_inputs`)."""
    key = json.dumps([GRAPH_FORMAT, content_manifest(index.manifest), embed_model], sort_keys=True, default=str)
    path = (
        Path(cache_dir) / f"gfmrag-graph-{hashlib.sha256(key.encode()).hexdigest()[:12]}.cache" if cache_dir else None
    )
    cached = load_cached_tensors(path) if path is not None else None  # None when missing or not intact
    if cached is not None:
        return GraphInputs(**cached)
    graph = gfmrag_graph_inputs(index, Embedder(embed_model))
    if path is not None:
        write_cache_tensors(path, vars(graph))
    return graph


class GFMRAGIndexKG(IndexKG):
    """The evaluator's index as GFM-RAG's graph (:func:`cached_gfmrag_graph`)."""

    def graph(self, kg: str) -> GraphInputs:
        return cached_gfmrag_graph(self.kg_index, self.embed_model, self.cache_dir)


class GFMRAGCheckpointRetriever(ModuleRetriever):
    """Rank passages with a GFM-RAG checkpoint folder.

    Args:
        folder: the folder holding ``model.pth`` and ``config.json`` (GFM-RAG's ``save_model_to_pretrained``;
            ``huggingface-cli download rmanluo/GFM-RAG-8M --local-dir <folder>``).
        embed_model: the sentence encoder of questions and relations (None: ``config.json``'s
            ``text_emb_model_name``); another name must be the same encoder stored elsewhere (a local copy,
            ``offline:all-mpnet-base-v2``), else the scores are not the checkpoint's.
        ranker, top_entities: the document ranker and the entities it reads (None: ``config.json``'s ranker,
            GFM-RAG's ``idf_topk`` over 20 entities when it names none).
        batch_size: questions per forward pass.
        device: where the module runs (``cpu``, ``cuda``).
        cache_dir: folder of the cached graph (None: ``$GLMRAG_CACHE_DIR/gnn_inputs``).
    """

    name = "gfmrag_checkpoint"

    def __init__(
        self,
        folder: str,
        embed_model: str | None = None,
        ranker: str | None = None,
        top_entities: int | None = None,
        batch_size: int = 4,
        device: str = "cpu",
        cache_dir: str | None = None,
    ) -> None:
        checkpoint = read_gfmrag_folder(folder)
        embed_model = embed_model or checkpoint.encoder
        if embed_model != checkpoint.encoder:
            log.warning(
                "%s: embedding with %s, config.json names %s; the scores are the checkpoint's only if both are the "
                "same encoder",
                folder,
                embed_model,
                checkpoint.encoder,
            )
        embedder = Embedder(embed_model)
        check_encoder(embedder, checkpoint.gnn.question_dim, checkpoint.normalize, checkpoint.path / CONFIG_FILE)
        evaluation = {"ranker": checkpoint.document_ranker(ranker), "top_entities": checkpoint.top_entities}
        module = GNNRetrieverModule(gnn=checkpoint.gnn, evaluation=evaluation, embed_model=embed_model)
        module.gnn.load_state_dict(checkpoint.state_dict)
        super().__init__(module.to(device), embedder, None, top_entities, batch_size, cache_dir)

    def kg_source(self, index: KGIndex, corpus: Corpus) -> GFMRAGIndexKG:
        return GFMRAGIndexKG(index, corpus, self.module.hparams.embed_model, False, self.cache_dir)


def check_encoder(embedder: Embedder, dim: int, normalize: bool, config_file: Path) -> None:
    """Refuse an encoder whose embeddings are not the checkpoint's inputs: of another size, or, where
    ``config.json`` says ``normalize: false``, one that does not normalise its own output (glmrag's
    :class:`~glmrag.index.embed.Embedder` always returns unit rows). Loads the encoder."""
    try:
        model, got = embedder.model, embedder.dim
    except OSError as err:  # transformers / sentence-transformers / huggingface_hub raise OSError subclasses
        raise OSError(
            f"{config_file} names the sentence encoder {embedder.model_name!r}, which could not be loaded "
            f"({type(err).__name__}: {str(err)[:200]}); put it in the local Hugging Face cache, or pass the same "
            "encoder from disk as embed_model (offline:all-mpnet-base-v2 for all-mpnet-base-v2)"
        ) from err
    if got != dim:
        raise ValueError(
            f"{embedder.model_name} embeds {got}-d vectors but the checkpoint of {config_file.parent} reads {dim}-d "
            f"question and relation features: embed with the encoder {config_file} names"
        )
    modules = list(model) if hasattr(model, "__iter__") else []  # a SentenceTransformer is a sequence of modules
    if not normalize and modules and type(modules[-1]).__name__ != "Normalize":
        raise ValueError(
            f"{config_file} says text_emb_model_config.normalize: false and {embedder.model_name} does not normalise "
            "its output, but glmrag embeds unit vectors: the checkpoint would read other features than it was "
            "trained on"
        )
