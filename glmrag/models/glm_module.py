"""The GLM retriever as a LightningModule (GLM-RAG, the project's main method).

A :class:`~glmrag.nn.glm_retriever.GLMRetriever` scores the entity nodes of each question's budgeted
subgraph (:mod:`glmrag.models.subgraph_data` streams them). Loss (GLM-RAG App. B, B.2): 0.56 x masked
ListCE, normalised over the subgraph's entity nodes only ("unscored entities must not enter the
partition function"), plus 0.44 x GFM-RAG's weighted BCE over the same nodes
(:func:`~glmrag.models.losses.gfm_rag_loss` with the node mask). Optimiser (GLM-RAG Table 14): AdamW,
lr 5e-4 for the head (entity scorer, question projection) and 1e-4 for the T5 backbone; the three extra
bias buckets train at the backbone's rate by default (``bucket_lr``; see below); batch 2 and 2 epochs
belong to the DataModule and the Trainer.

Evaluation ranks passages as the GNN does: the node logits are scattered into a vector over every
entity of the question's KG (entities outside the subgraph get ``-inf``: never selected) and GFM-RAG's
document ranker (``idf_topk``, 20 entities) maps them to passages.

Three choices are not in GLM-RAG; their defaults follow the GLM authors' public code (Plenz & Frank,
"Graph Language Models", ACL 2024), and glmrag's earlier behaviour stays a named option:
``position_conflict`` (``last``: the last triple positions a token pair; ``nearest``),
``question_eos`` (``</s>`` after the question; False), and ``bucket_lr`` (``backbone``: the extra
buckets are rows of T5's relative-position table there, trained with T5; ``head``: at ``head_lr``).

The module also records how its subgraphs are built (hops, triplet budget, layout, FullyConnected
question text, position mode and conflict rule, question EOS): the DataModule must build the same
(checked in ``setup``), and a
:class:`~glmrag.retrievers.glm_checkpoint.GLMCheckpointRetriever` rebuilds them at inference.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import T5Config

from glmrag.graph.subgraph import MAX_HOPS, MAX_TRIPLETS
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.ranking import DOC_RANKER_ENTITIES, rank_passages
from glmrag.models.glm_inputs import SubgraphSettings, load_tokenizer
from glmrag.models.losses import gfm_rag_loss
from glmrag.models.retriever_module import RetrieverModule
from glmrag.nn.glm import GLMEncoder
from glmrag.nn.glm_retriever import GLMInputs, GLMRetriever

HEAD_LR = 5e-4
"""GLM-RAG Table 14: learning rate of the entity scorer and question projection."""
BACKBONE_LR = 1e-4
"""GLM-RAG Table 14: learning rate of the T5 backbone."""
BUCKET_LRS = ("backbone", "head")
"""Which learning rate the GLM's extra buckets take (not in GLM-RAG; ``backbone`` as the GLM reference code)."""
SUBGRAPH_FIELDS = (
    "max_hops",
    "max_triplets",
    "layout",
    "use_text",
    "position_mode",
    "seed",
    "question_eos",
    "position_conflict",
)
"""The :class:`SubgraphSettings` fields the module holds (all but ``precompute``, which is the DataModule's)."""
MODEL_NAMES = {"seed": "subgraph_seed"}
"""Hyper-parameter names of the module that differ from the :class:`SubgraphSettings` field."""

log = logging.getLogger(__name__)

RULES_BEFORE_REFERENCE = {"position_conflict": "nearest", "question_eos": False, "bucket_lr": "head"}
"""What checkpoints saved before these three hyper-parameters existed were trained with: read such a
checkpoint with today's defaults and its positions, question tokens and bucket groups silently change."""


class GLMRetrieverModule(RetrieverModule):
    """Trains the GLM retriever.

    Args:
        t5: the pretrained T5 to start from (``t5-small``, ``t5-base``, ``t5-large``, or a folder).
        t5_config: instead of ``t5``, a randomly initialised T5 with these ``T5Config`` fields (no hub needed;
            the offline demo and the tests). ``vocab_size`` defaults to the tokenizer's.
        tokenizer: tokenizer of the subgraphs (None: ``t5``'s).
        attention: ``global`` (GLM-RAG default) or ``local`` GLM.
        aggregation: node pooling ``mean`` | ``first`` | ``last``.
        query_interaction: multiply node embeddings by the projected question embedding (GLM-RAG default on).
        question_dim: size of the question sentence embedding (384: all-MiniLM-L6-v2).
        backend: attention backend, ``eager`` or ``flex`` (:mod:`glmrag.nn.glm`).
        gradient_checkpointing: recompute T5 blocks in the backward pass (saves activation memory).
        max_hops, max_triplets, layout, use_text, position_mode, subgraph_seed: how subgraphs are built
            (GLM-RAG App. B.2: 2 hops, 600 triplets; ``layout=linear`` is the Table 15 baseline "without
            graph-aware attention"; ``use_text``: FullyConnected, the question tokens appended;
            ``subgraph_seed``: the randomized BFS that fills the budget).
        listce_weight, bce_weight, temperature: the loss (GLM-RAG App. B: 0.56 / 0.44; GFM-RAG's 0.2).
        position_conflict: ``last`` (GLM reference code) or ``nearest``: see :mod:`glmrag.graph.positions`.
        question_eos: end the appended question with ``</s>`` (GLM reference code) or not.
        head_lr, backbone_lr: AdamW learning rates (GLM-RAG Table 14).
        bucket_lr: ``backbone`` (GLM reference code: the extra buckets are bias-table rows trained with T5) or
            ``head`` (glmrag before): the learning rate of the three extra buckets.
        optimizer: ``params -> Optimizer`` (Hydra ``_partial_: true``) given two parameter groups with their
            lr; None: AdamW. scheduler: ``optimizer -> LRScheduler`` or None.
        ks, ranker, top_entities: evaluation cut-offs and the document ranker (GFM-RAG ``idf_topk``, 20).
        embed_model: sentence encoder of the question embeddings; checked against the DataModule.
    """

    def __init__(
        self,
        t5: str = "t5-base",
        t5_config: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        attention: str = "global",
        aggregation: str = "mean",
        query_interaction: bool = True,
        question_dim: int = 384,
        backend: str = "eager",
        gradient_checkpointing: bool = False,
        max_hops: int = MAX_HOPS,
        max_triplets: int = MAX_TRIPLETS,
        layout: str = "graph",
        use_text: bool = True,
        position_mode: str = "triple",
        subgraph_seed: int = 0,
        position_conflict: str = "last",
        question_eos: bool = True,
        listce_weight: float = 0.56,
        bce_weight: float = 0.44,
        temperature: float = 0.2,
        head_lr: float = HEAD_LR,
        backbone_lr: float = BACKBONE_LR,
        bucket_lr: str = "backbone",
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
        ks: Sequence[int] = (1, 2, 5, 10),
        ranker: str = "idf_topk",
        top_entities: int = DOC_RANKER_ENTITIES,
        embed_model: str = DEFAULT_MODEL,
    ) -> None:
        super().__init__()
        if bucket_lr not in BUCKET_LRS:
            raise ValueError(f"bucket_lr must be one of {BUCKET_LRS}, got {bucket_lr!r}")
        ks = self.init_evaluation(ks, ranker)  # checked, and a plain tuple in the checkpoint
        tokenizer = tokenizer or t5
        t5_config = dict(t5_config) if t5_config is not None else None  # plain dict in the checkpoint
        self.save_hyperparameters(ignore=["optimizer", "scheduler"], logger=False)
        self.subgraph_settings()  # checks the subgraph fields (layout, position mode, conflict rule)
        self.optimizer_factory = optimizer or torch.optim.AdamW
        self.scheduler_factory = scheduler

        encoder_args = {"attention": attention, "backend": backend}
        if t5_config is not None:
            config = T5Config(**{"vocab_size": len(load_tokenizer(tokenizer)), **t5_config})
            encoder = GLMEncoder.from_config(config, **encoder_args)
        else:
            encoder = GLMEncoder.from_pretrained(t5, **encoder_args)
        if gradient_checkpointing:
            encoder.enable_gradient_checkpointing()
        self.net = GLMRetriever(encoder, question_dim, aggregation, query_interaction)
        self.loss_fn = functools.partial(
            gfm_rag_loss, bce_weight=bce_weight, listce_weight=listce_weight, temperature=temperature
        )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Give a checkpoint from before ``position_conflict`` / ``question_eos`` / ``bucket_lr`` the rules
        it was trained with (:data:`RULES_BEFORE_REFERENCE`), not today's reference defaults."""
        saved = checkpoint.get("hyper_parameters", {})
        missing = {key: value for key, value in RULES_BEFORE_REFERENCE.items() if key not in saved}
        if missing:
            log.warning("checkpoint predates %s: read with the rules it was trained with, %s", sorted(missing), missing)
            self.hparams.update(missing)

    def setup(self, stage: str) -> None:
        """Check that the DataModule builds the subgraphs this module expects."""
        self.reset_metrics(stage)
        dm = getattr(self.trainer, "datamodule", None)
        if dm is None or not callable(getattr(dm, "index", None)):
            raise RuntimeError(
                "GLMRetrieverModule reads its KGs from the DataModule: pass datamodule=SubgraphDataModule(...) "
                "to trainer.fit/validate/test (a module with an index(kg) method)"
            )
        theirs = getattr(dm, "settings", None)
        if isinstance(theirs, SubgraphSettings):
            ours = self.subgraph_settings()
            for name in SUBGRAPH_FIELDS:
                if getattr(theirs, name) != getattr(ours, name):
                    raise ValueError(
                        f"the DataModule has {name}={getattr(theirs, name)!r} but the model {getattr(ours, name)!r}; "
                        f"set datamodule.subgraph.{name}: ${{model.{MODEL_NAMES.get(name, name)}}}"
                    )
        dm_hp = getattr(dm, "hparams", {})
        for name in ("tokenizer", "embed_model"):
            if name in dm_hp and dm_hp[name] != self.hparams[name]:
                raise ValueError(
                    f"the DataModule has {name}={dm_hp[name]!r} but the model {self.hparams[name]!r}; "
                    f"set datamodule.{name}: ${{model.{name}}}"
                )

    def subgraph_settings(self) -> SubgraphSettings:
        """How this module's subgraphs are built: the DataModule must build the same (checked in :meth:`setup`),
        and :class:`~glmrag.retrievers.glm_checkpoint.GLMCheckpointRetriever` rebuilds them at inference."""
        hp = self.hparams
        return SubgraphSettings(**{field: hp[MODEL_NAMES.get(field, field)] for field in SUBGRAPH_FIELDS})

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Two AdamW groups: the head at ``head_lr``, the T5 backbone at ``backbone_lr`` (GLM-RAG Table 14).

        The extra buckets join the backbone group when ``bucket_lr`` is ``backbone``, the head's otherwise.
        """
        head = self.net.head_parameters()
        if self.hparams.bucket_lr == "backbone":
            head = [p for p in head if p is not self.net.encoder.extra_bias]
        ids = {id(p) for p in head}
        backbone = [p for p in self.net.parameters() if id(p) not in ids]
        return [
            {"params": backbone, "lr": self.hparams.backbone_lr, "name": "backbone"},
            {"params": head, "lr": self.hparams.head_lr, "name": "head"},
        ]

    def forward(self, inputs: GLMInputs) -> torch.Tensor:
        """Node logits. Shapes: :class:`GLMInputs` -> ``(B, N)``."""
        return self.net(inputs)

    def model_step(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss over the real rows and the node logits (unscored entries are masked by ``node_mask``).

        Shapes: batch ``target``, ``node_mask`` (B, N), ``real`` (B,) -> loss (), logits (B, N).
        """
        logits = self(GLMInputs.from_batch(batch)).float()  # (B, N)
        real = batch["real"]
        mask = batch["node_mask"][real]  # (B', N)
        if not mask.any():  # no real row with a scored entity: a zero that keeps the graph connected
            return logits.sum() * 0.0, logits
        loss = self.loss_fn(logits[real], batch["target"][real], mask)
        return loss, logits

    def ranked_passages(self, batch: dict[str, Any], logits: torch.Tensor) -> list[list[str]]:
        """The best ``max(ks)`` passages of each row; entities outside a row's subgraph get ``-inf``.

        Rows are ranked together per KG (a batch may mix KGs).
        """
        node_logits = logits.detach().float().cpu().numpy()  # (B, N)
        entity_of_node = batch["entity_of_node"].cpu().numpy()  # (B, N)
        node_mask = batch["node_mask"].cpu().numpy()  # (B, N)
        ranked: list[list[str]] = [[] for _ in batch["kg"]]
        for kg in dict.fromkeys(batch["kg"]):
            index = self.trainer.datamodule.index(kg)
            rows = [row for row, name in enumerate(batch["kg"]) if name == kg]
            scores = np.stack(
                [entity_scores(node_logits[r], entity_of_node[r], node_mask[r], index.num_entities) for r in rows]
            )  # (b, E)
            positions, _ = rank_passages(
                scores, index, max(self.ks), self.hparams.ranker, self.hparams.top_entities
            )  # (b, max ks)
            for row, top in zip(rows, positions, strict=True):
                ranked[row] = [index.passage_ids[p] for p in top]
        return ranked


def entity_scores(node_logits: np.ndarray, entity_of_node: np.ndarray, node_mask: np.ndarray, num_entities: int):
    """Scatter the logits of entity nodes into a vector over the KG's entities, ``-inf`` elsewhere.

    Shapes: **node_logits**, **entity_of_node**, **node_mask** ``(N,)`` -> ``(E,)`` float64.
    """
    scores = np.full(num_entities, -np.inf)
    scores[entity_of_node[node_mask]] = node_logits[node_mask]
    return scores
