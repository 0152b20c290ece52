"""The GFM-RAG GNN retriever as a LightningModule: KG-completion pretraining and QA fine-tuning.

GFM-RAG (Luo et al. 2025) pretrains its :class:`~glmrag.nn.gnn.QueryGNN` on KG
completion (``stage="kgc"``, :mod:`glmrag.nn.kgc`) and then fine-tunes it to rank
the entities of a question's supporting passages (``stage="qa"``, loss
:func:`~glmrag.models.losses.gfm_rag_loss`). GLM-RAG Table 14 fine-tunes with
AdamW at lr 5e-4, batch 4, 5 epochs, alpha = 0.3 (the BCE weight) and ranks
documents from the top 20 entities; those are the defaults here (the batch
size and epochs belong to the DataModule and the Trainer). A fine-tuning run
starts from pretrained weights with ``init_from``.

Validation and test rank passages from the entity logits with the evaluator's
document ranker (:func:`~glmrag.index.ranking.rank_passages`) and
score them with :func:`glmrag.index.ranking_metrics.retrieval_metrics`, so
``val/recall@2`` is the number the evaluator reports for a
:class:`~glmrag.retrievers.gnn_checkpoint.CheckpointRetriever` of this module on
the same questions (passage lists of ``max(ks)``; questions without gold
passages excluded, as the evaluator does).

The KGs come from the DataModule (:class:`~glmrag.models.gnn_datamodule.KGQADataModule`):
in ``setup`` the module checks it and later reads ``trainer.datamodule.graph(kg)``
and ``.index(kg)``; nothing graph-sized is stored in the module or its checkpoints.

Subgraph restriction (GLM-RAG §5.5, Table 3: GFM-RAG* reading at most 600 / 500 /
400 / 300 triplets of each question's 2-hop subgraph). With ``max_triplets`` set,
the module selects each question's subgraph with the GLM's own call
(:func:`question_subgraphs`: :func:`~glmrag.graph.subgraph.select_subgraph` with
the seed :meth:`~glmrag.models.glm_inputs.SubgraphSettings.bfs_seed`), so GLM and
GNN read the same triplets for the same ``max_hops``, ``max_triplets`` and
``subgraph_seed``. The GNN then passes messages of each question along its own
subgraph only (:class:`~glmrag.nn.subgraph_batch.SubgraphBatch`), entities outside it get
``-inf``, and the loss is normalised over the subgraph's entities, as the GLM's
masked ListCE (GLM-RAG App. B.2). The settings are hyper-parameters, so a
:class:`~glmrag.retrievers.gnn_checkpoint.CheckpointRetriever` rebuilds the same
subgraphs; the module selects them itself from the DataModule's index (cached per
question), so the DataModule needs no subgraph settings. KG-completion
pretraining (``stage="kgc"``) always runs on the whole KG, as in GFM-RAG.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from glmrag.graph.subgraph import MAX_HOPS, Subgraph, select_subgraph
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import DOC_RANKER_ENTITIES, rank_passages
from glmrag.models.glm_inputs import SubgraphSettings
from glmrag.models.losses import gfm_rag_loss
from glmrag.models.retriever_module import RetrieverModule
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.graph_inputs import GraphInputs
from glmrag.nn.kgc import ADVERSARIAL_TEMPERATURE, NUM_NEGATIVES, kgc_loss, sample_kgc_batch
from glmrag.nn.subgraph_batch import SubgraphBatch

STAGES = ("qa", "kgc")
LEARNING_RATE = 5e-4
"""GLM-RAG Table 14, GFM-RAG fine-tuning: AdamW, lr 5e-4 (also GFM-RAG's pretraining lr)."""


def default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW at lr 5e-4 (GLM-RAG Table 14)."""
    return torch.optim.AdamW(params, lr=LEARNING_RATE)


def question_subgraphs(index: KGIndex, question_ids: Sequence[str], settings: SubgraphSettings) -> list[Subgraph]:
    """Each question's budgeted subgraph, selected exactly as the GLM's records select it.

    The call and its arguments are :func:`glmrag.models.glm_inputs.question_record`'s: the question's
    linked seeds, ``settings.max_hops``, ``settings.max_triplets`` and the BFS seed
    ``settings.bfs_seed(question_id)`` (GLM-RAG App. B.2).
    """
    return [
        select_subgraph(index, index.seeds(q), settings.max_hops, settings.max_triplets, seed=settings.bfs_seed(q))
        for q in question_ids
    ]


def subgraph_batch(index: KGIndex, subgraphs: Sequence[Subgraph]) -> SubgraphBatch:
    """The :class:`SubgraphBatch` of selected subgraphs: their triples and their entities (seeds included)."""
    return SubgraphBatch.from_triples(
        [index.triples[s.triples] for s in subgraphs], [s.entities for s in subgraphs], index.num_relations
    )


class GNNRetrieverModule(RetrieverModule):
    """Trains a :class:`QueryGNN` to score the entities of a question's supporting passages.

    Args:
        hidden_channels, num_layers, question_dim, relation_dim, node_dim, use_node_features, query_injection,
            dropout, aggregation: the fields of :class:`~glmrag.nn.gnn.GNNConfig` (``aggregation`` changes
            memory, not results, so checkpoints saved before it existed load with the default, ``fused``).
        max_hops, max_triplets, subgraph_seed: restrict each question to the subgraph the GLM reads (GLM-RAG
            §5.5, Table 3; selection GLM-RAG App. B.2: 2 hops); ``max_triplets=None`` runs on the whole KG
            (GFM-RAG) and ignores the other two.
        optimizer: ``params -> Optimizer`` (Hydra ``_partial_: true``); None: AdamW lr 5e-4.
        scheduler: ``optimizer -> LRScheduler`` (``_partial_: true``), stepped per epoch on ``val/loss``; or None.
        bce_weight, listce_weight, temperature: :func:`gfm_rag_loss` (GFM-RAG: 0.3, 0.7, 0.2).
        stage: ``qa`` (fine-tuning) or ``kgc`` (KG-completion pretraining on the DataModule's triple batches,
            ``task="kgc"``); validation is QA retrieval in both.
        num_negatives, adversarial_temperature: KG-completion loss (GFM-RAG: 256 strict negatives, temperature 1).
        hide_target_edges: KG completion without the batch's target edges (NBFNet/ULTRA ``remove_easy_edges``);
            GFM-RAG keeps them visible (False).
        ks: cut-offs of the logged ``recall@k``; must include 2.
        ranker, top_entities: document ranker of validation/test (GFM-RAG ``idf_topk`` over 20 entities).
        embed_model: sentence encoder of questions and relations the GNN reads; checked against the DataModule
            and used by :class:`~glmrag.retrievers.gnn_checkpoint.CheckpointRetriever`.
        init_from: a checkpoint of this module (e.g. the ``kgc`` stage) whose GNN weights start ``fit``.
    """

    def __init__(
        self,
        hidden_channels: int = 512,
        num_layers: int = 6,
        question_dim: int = 384,
        relation_dim: int = 384,
        node_dim: int = 384,
        use_node_features: bool = False,
        query_injection: str = "all",
        dropout: float = 0.0,
        aggregation: str = "fused",
        max_hops: int = MAX_HOPS,
        max_triplets: int | None = None,
        subgraph_seed: int = 0,
        optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
        scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
        bce_weight: float = 0.3,
        listce_weight: float = 0.7,
        temperature: float = 0.2,
        stage: str = "qa",
        num_negatives: int = NUM_NEGATIVES,
        adversarial_temperature: float = ADVERSARIAL_TEMPERATURE,
        hide_target_edges: bool = False,
        ks: Sequence[int] = (1, 2, 5, 10),
        ranker: str = "idf_topk",
        top_entities: int = DOC_RANKER_ENTITIES,
        embed_model: str = DEFAULT_MODEL,
        init_from: str | None = None,
    ) -> None:
        super().__init__()
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        ks = self.init_evaluation(ks, ranker)  # checked, and a plain tuple in the checkpoint
        self.subgraph_settings = (
            None
            if max_triplets is None
            else SubgraphSettings(max_hops=max_hops, max_triplets=max_triplets, seed=subgraph_seed)
        )  # validated here: negative budgets raise
        # Optimizer and scheduler factories are not hyper-parameters: a checkpoint holds plain values only,
        # so it loads with torch.load(weights_only=True).
        self.save_hyperparameters(ignore=["optimizer", "scheduler"], logger=False)
        self.optimizer_factory = optimizer or default_optimizer
        self.scheduler_factory = scheduler
        self.gnn = QueryGNN(
            GNNConfig(
                hidden_channels=hidden_channels,
                num_layers=num_layers,
                question_dim=question_dim,
                relation_dim=relation_dim,
                node_dim=node_dim,
                use_node_features=use_node_features,
                query_injection=query_injection,
                dropout=dropout,
                aggregation=aggregation,
            )
        )
        if stage == "kgc":
            for module in self.gnn.kgc_unused():
                module.requires_grad_(False)
        self.loss_fn = functools.partial(
            gfm_rag_loss, bce_weight=bce_weight, listce_weight=listce_weight, temperature=temperature
        )
        self._graphs: dict[tuple[str, torch.device], GraphInputs] = {}
        self._subgraphs: dict[tuple[str, str], Subgraph] = {}

    # -- the KGs, handed over by the DataModule --

    def setup(self, stage: str) -> None:
        """Check the DataModule (the source of the KGs) and, for ``fit``, load ``init_from``."""
        self._graphs.clear()
        self._subgraphs.clear()
        self.reset_metrics(stage)
        dm = getattr(self.trainer, "datamodule", None)
        if dm is None or not callable(getattr(dm, "graph", None)) or not callable(getattr(dm, "index", None)):
            raise RuntimeError(
                "GNNRetrieverModule reads its KGs from the DataModule: pass datamodule=KGQADataModule(...) "
                "to trainer.fit/validate/test (a module with graph(kg) and index(kg) methods)"
            )
        dm_hp = getattr(dm, "hparams", {})
        if dm_hp.get("embed_model", self.hparams.embed_model) != self.hparams.embed_model:
            raise ValueError(
                f"the DataModule embeds with {dm_hp['embed_model']!r} but the model expects "
                f"{self.hparams.embed_model!r}; set model.embed_model to data.embed_model"
            )
        if self.hparams.use_node_features and not dm_hp.get("node_features", True):
            raise ValueError("use_node_features=True needs node features: set data.node_features=true")
        if stage == "fit" and dm_hp.get("task", self.hparams.stage) != self.hparams.stage:
            raise ValueError(
                f"model.stage={self.hparams.stage!r} but data.task={dm_hp['task']!r}; set both to the same stage"
            )
        if stage == "fit" and self.hparams.init_from:
            self.load_gnn_weights(self.hparams.init_from)

    def load_gnn_weights(self, ckpt_path: str) -> None:
        """Copy the GNN weights of a checkpoint of this module (any stage) into ``self.gnn`` (strict)."""
        state = torch.load(ckpt_path, map_location="cpu", weights_only=True)["state_dict"]
        self.gnn.load_state_dict({k.removeprefix("gnn."): v for k, v in state.items() if k.startswith("gnn.")})

    def graph(self, kg: str) -> GraphInputs:
        """The DataModule's inputs of ``kg``, moved to this module's device once."""
        key = (kg, self.device)
        if key not in self._graphs:
            self._graphs[key] = self.trainer.datamodule.graph(kg).to(self.device)
        return self._graphs[key]

    def index(self, kg: str) -> KGIndex:
        return self.trainer.datamodule.index(kg)

    def subgraphs(self, kg: str, question_ids: Sequence[str]) -> SubgraphBatch | None:
        """The questions' subgraphs in the DataModule's index of ``kg``, on this module's device; None when
        the GNN runs on the whole KG. Each question's subgraph is selected once (it is deterministic)."""
        if self.subgraph_settings is None:
            return None
        index = self.index(kg)
        missing = [q for q in dict.fromkeys(question_ids) if (kg, q) not in self._subgraphs]
        for q, sub in zip(missing, question_subgraphs(index, missing, self.subgraph_settings), strict=True):
            self._subgraphs[kg, q] = sub
        return subgraph_batch(index, [self._subgraphs[kg, q] for q in question_ids]).to(self.device)

    # -- forward and the shared step --

    def forward(
        self,
        graph: GraphInputs,
        question_emb: torch.Tensor,
        seed_weight: torch.Tensor,
        subgraphs: SubgraphBatch | None = None,
    ) -> torch.Tensor:
        """Entity logits of a batch of questions on one KG; ``-inf`` outside each question's subgraph.

        A module with ``max_triplets`` set needs the questions' ``subgraphs`` (:meth:`subgraphs`, or
        :func:`subgraph_batch` of :func:`question_subgraphs` without a DataModule).

        Shapes: **question_emb** ``(B, question_dim)``, **seed_weight** ``(B, E)`` -> ``(B, E)``.
        """
        if (subgraphs is None) != (self.subgraph_settings is None):
            raise ValueError(
                f"this GNN has max_triplets={self.hparams.max_triplets}: pass subgraphs exactly when it is set "
                "(GNNRetrieverModule.subgraphs(kg, question_ids) builds them)"
            )
        return self.gnn(graph, question_emb, seed_weight, subgraphs=subgraphs)

    def model_step(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and entity logits of a QA batch; the loss covers the rows marked ``real``.

        With subgraphs, the loss sees only each question's subgraph entities (GLM-RAG App. B.2: the
        partition function of ListCE and the BCE run over the scored entities; a target entity outside
        the subgraph cannot be ranked and is left out, as for the GLM).

        Shapes: batch ``question_emb`` (B, d), ``seed_weight``, ``target`` (B, E), ``real`` (B,)
            -> loss (), logits (B, E).
        """
        graph = self.graph(batch["kg"])
        subgraphs = self.subgraphs(batch["kg"], batch["question_ids"])
        logits = self(graph, batch["question_emb"], batch["seed_weight"], subgraphs)  # (B, E)
        real = batch["real"]
        mask = None if subgraphs is None else subgraphs.entity_mask(graph.num_nodes)[real]  # (B', E)
        loss = self.loss_fn(logits[real], batch["target"][real], mask)  # 0 when no row is real
        return loss, logits

    def kgc_step(self, batch: dict[str, Any]) -> torch.Tensor:
        """KG-completion loss of a batch of triples of one KG (GFM-RAG pretraining).

        :func:`sample_kgc_batch` turns each of the batch's ``triples`` (B, 3) into one query (the
        DataLoader already shuffles and batches them, so an epoch sees every triple once), with strict
        negatives; its generator is seeded by the global step and rank, so a resumed run draws the same.
        """
        graph = self.graph(batch["kg"])
        generator = torch.Generator().manual_seed(1_000_003 * self.global_step + self.global_rank)
        triples = batch["triples"]
        kgc = sample_kgc_batch(
            graph, triples, None, self.hparams.num_negatives, generator, self.hparams.hide_target_edges
        )
        return kgc_loss(self.gnn, graph, kgc, self.hparams.adversarial_temperature)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.hparams.stage != "kgc":
            return super().training_step(batch, batch_idx)
        loss = self.kgc_step(batch)
        self.log_train_loss(loss, len(batch["triples"]))
        return loss

    def ranked_passages(self, batch: dict[str, Any], logits: torch.Tensor) -> list[list[str]]:
        """The best ``max(ks)`` passages of each row, from the logits of every entity of the batch's KG."""
        index = self.index(batch["kg"])
        positions, _ = rank_passages(
            logits.detach().float().cpu().numpy(),
            index,
            top_k_passages=max(self.ks),
            method=self.hparams.ranker,
            top_entities=self.hparams.top_entities,
        )  # (B, max ks)
        return [[index.passage_ids[p] for p in row] for row in positions]
