"""A trained GNN checkpoint as a retriever: the GFM-RAG family in the shared evaluator.

:class:`CheckpointRetriever` loads a :class:`~glmrag.models.gnn_module.GNNRetrieverModule`
checkpoint with Lightning's ``load_from_checkpoint`` (``torch.load`` with
``weights_only``: tensors and plain values only), scores every entity of the
index for each question, and ranks passages with the same document ranker
(:func:`~glmrag.index.ranking.rank_passages`) that the module's
validation uses, so the evaluator reproduces ``val/recall@k``.

A checkpoint trained with ``max_triplets`` (GFM-RAG* restricted to the GLM's
subgraphs, GLM-RAG §5.5, Table 3) rebuilds each question's subgraph from the
checkpoint's ``subgraph`` settings (``max_hops``, ``max_triplets``, ``seed``) with the
module's own :func:`~glmrag.models.gnn_module.question_subgraphs`; entities
outside it score ``-inf`` and are never ranked.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from glmrag.data.types import Corpus, Question
from glmrag.index.embed import Embedder
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, rank_passages, top_k_stable
from glmrag.io import load_checkpoint_dict, local_checkpoint, verify_checkpoint
from glmrag.models.gnn_input_cache import (
    cached_graph_inputs,
    cached_passage_embeddings,
    default_inputs_cache_dir,
)
from glmrag.models.gnn_module import GNNRetrieverModule, question_subgraphs, subgraph_batch
from glmrag.nn.graph_inputs import GraphInputs, seed_weights
from glmrag.nn.prior import passage_entity_matrix, passage_logits
from glmrag.retrievers.base import Ranking
from glmrag.retrievers.glm_checkpoint import GLMCheckpointRetriever

MODEL_HPARAMS = ("embed_model", "glm.t5", "glm.tokenizer")
"""Hyper-parameters of a checkpoint that name a pretrained model its retriever loads (``node.field``: nested)."""


def named_models(hparams: dict) -> dict[str, str]:
    """The :data:`MODEL_HPARAMS` of a checkpoint's hyper-parameters that are set."""
    out = {}
    for key in MODEL_HPARAMS:
        node, _, name = key.rpartition(".")
        value = (hparams.get(node) or {}).get(name) if node else hparams.get(key)
        if isinstance(value, str):
            out[key] = value
    return out


class CheckpointRetriever:
    """Rank passages with a trained GNN checkpoint.

    Args:
        ckpt_path: a Lightning checkpoint of :class:`GNNRetrieverModule`.
        ranker, top_entities: document ranker (None: the checkpoint's own ``evaluation``, the one its validation
            used; GFM-RAG's is ``idf_topk`` over the top 20 entities); the ``top_entities`` best entities and
            their logits are also returned in each Ranking.
        batch_size: questions per GNN forward pass (memory grows with ``batch_size * triples * hidden``).
        device: where the GNN runs (``cpu``, ``cuda``, ``cuda:1``).
        cache_dir: folder of the cached relation features, shared with ``KGQADataModule.inputs_cache_dir``
            (None: ``$GLMRAG_CACHE_DIR/gnn_inputs``, the DataModule's default).
    """

    name = "checkpoint"

    def __init__(
        self,
        ckpt_path: str,
        ranker: str | None = None,
        top_entities: int | None = None,
        batch_size: int = 8,
        device: str = "cpu",
        cache_dir: str | None = None,
    ) -> None:
        self.ckpt_path = str(ckpt_path)
        """The checkpoint, for the evaluator's training-overlap guard (:func:`glmrag.eval.overlap.seen_questions`)."""
        self.device = torch.device(device)
        self.module = GNNRetrieverModule.load_from_checkpoint(
            verify_checkpoint(local_checkpoint(ckpt_path)), map_location=self.device, weights_only=True
        )
        self.module.eval()
        evaluation = self.module.evaluation
        self.ranker = ranker or evaluation.ranker
        self.top_entities = top_entities or evaluation.top_entities
        self.batch_size = batch_size
        self.cache_dir = cache_dir or default_inputs_cache_dir()
        self.embedder = Embedder(self.module.hparams.embed_model)
        self._graphs: dict[int, tuple[KGIndex, GraphInputs]] = {}

    def graph(self, index: KGIndex) -> GraphInputs:
        """The GNN inputs of ``index`` on this retriever's device, built once per index object."""
        cached = self._graphs.get(id(index))
        if cached is None or cached[0] is not index:
            hp = self.module.hparams
            graph = cached_graph_inputs(index, hp.embed_model, self.module.config.use_node_features, self.cache_dir)
            cached = self._graphs[id(index)] = (index, graph.to(self.device))
        return cached[1]

    def question_embeddings(self, questions: Sequence[Question]) -> torch.Tensor:
        """Shapes: questions (Q,) -> (Q, d) float32 sentence embeddings, by the checkpoint's encoder."""
        return torch.from_numpy(self.embedder.encode([q.question for q in questions]))

    def entity_logits(
        self, questions: Sequence[Question], index: KGIndex, question_emb: torch.Tensor | None = None
    ) -> torch.Tensor:
        """GNN logits of every entity for each question, on the CPU; ``-inf`` outside a restricted
        checkpoint's subgraphs. ``question_emb``: the questions' embeddings, when the caller has them.

        Shapes: questions (Q,), **question_emb** ``(Q, d)`` -> (Q, E) float32.
        """
        settings = self.module.subgraph_settings
        graph = self.graph(index)
        if question_emb is None:
            question_emb = self.question_embeddings(questions)  # (Q, d)
        chunks = []
        with torch.inference_mode():
            for start in range(0, len(questions), self.batch_size):
                batch = questions[start : start + self.batch_size]
                ids = [q.id for q in batch]
                seeds = seed_weights(index, ids).to(self.device)  # (b, E)
                query = question_emb[start : start + len(batch)].to(self.device)  # (b, d)
                subgraphs = None
                if settings is not None:
                    subgraphs = subgraph_batch(index, question_subgraphs(index, ids, settings)).to(self.device)
                chunks.append(self.module(graph, query, seeds, subgraphs).float().cpu())  # (b, E)
        return torch.cat(chunks) if chunks else torch.zeros(0, index.num_entities)

    def passage_logits(
        self, question_emb: torch.Tensor, index: KGIndex, corpus: Corpus, logits: torch.Tensor
    ) -> torch.Tensor:
        """The module's fused passage logits (entity mass and the prior's dense term), as its validation scores them.

        Shapes: **question_emb** ``(Q, d)``, **logits** ``(Q, E)`` -> ``(Q, P)`` float32 on the CPU.
        """
        passage_emb = cached_passage_embeddings(corpus, index, self.module.hparams.embed_model)  # (P, d)
        matrix, weight = passage_entity_matrix(index), self.module.prior.dense_weight.detach().cpu()
        with torch.inference_mode():
            return passage_logits(logits, matrix, weight, question_emb, passage_emb)

    def retrieve(self, questions: Sequence[Question], index: KGIndex, corpus: Corpus, top_k: int = 10) -> list[Ranking]:
        """One Ranking per question: the ``top_k`` best passages and the ``top_entities`` best entities."""
        if len(corpus) != index.num_passages:
            raise ValueError(f"the index has {index.num_passages} passages but the corpus {len(corpus)}")
        questions = list(questions)
        question_emb = self.question_embeddings(questions)  # (Q, d), once for the GNN and the dense term
        logits = self.entity_logits(questions, index, question_emb).numpy()  # (Q, E)
        fused = None
        if self.module.has_dense_term:  # the fused passage score of a prior with a dense term (glmrag/nn/prior.py)
            fused = self.passage_logits(question_emb, index, corpus, torch.from_numpy(logits)).numpy()  # (Q, P)
        positions, scores = rank_passages(logits, index, top_k, self.ranker, self.top_entities, fused)  # (Q, k)
        entities, entity_scores = top_k_stable(logits, self.top_entities)  # (Q, top_entities)
        return make_rankings([q.id for q in questions], index.passage_ids, positions, scores, entities, entity_scores)


def load_checkpoint_retriever(
    ckpt_path: str,
    ranker: str | None = None,
    top_entities: int | None = None,
    batch_size: int = 4,
    device: str = "cpu",
) -> CheckpointRetriever | GLMCheckpointRetriever:
    """The retriever of any checkpoint written by ``train.py``: a GLM (hyper-parameters with a ``glm`` node, or a
    flat ``t5``) or a GNN; ``ranker`` and ``top_entities`` None: the checkpoint's own (its validation's)."""
    hparams = load_checkpoint_dict(ckpt_path).get("hyper_parameters", {})
    try:
        if "glm" in hparams or "t5" in hparams:
            return GLMCheckpointRetriever(ckpt_path, batch_size, device, ranker, top_entities)
        return CheckpointRetriever(ckpt_path, ranker, top_entities, batch_size, device)
    except OSError as err:  # transformers / sentence-transformers / huggingface_hub raise OSError subclasses
        models = named_models(hparams)
        raise OSError(
            f"the checkpoint {ckpt_path} needs the model(s) {models}, which could not be loaded from disk "
            f"({type(err).__name__}: {str(err)[:200]}); put them in the local Hugging Face cache, or name a local "
            "path or an offline: model when training"
        ) from err
