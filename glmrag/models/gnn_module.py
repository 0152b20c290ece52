"""The GFM-RAG GNN retriever as a LightningModule: KG-completion pretraining and QA fine-tuning.

GFM-RAG (Luo et al. 2025) pretrains its :class:`~glmrag.nn.gnn.QueryGNN` on KG completion
(``stage="kgc"``, :mod:`glmrag.nn.kgc`) and fine-tunes it to rank the entities of a question's supporting
passages (``stage="qa"``, :func:`~glmrag.models.losses.gfm_rag_loss`); GLM-RAG Table 14's settings are the
defaults. The module takes typed settings nodes: ``gnn`` (:class:`~glmrag.nn.gnn.GNNConfig`), ``subgraph``,
``loss``, ``kgc``, ``evaluation``. Validation ranks passages with
:meth:`~glmrag.models.retriever_module.RetrieverModule.rank`, as a
:class:`~glmrag.retrievers.checkpoint.CheckpointRetriever` of it does, so ``val/recall@2`` is what the evaluator
scores. The KGs come from the :class:`~glmrag.datamodules.kg_source.GraphSource` given as ``kgs`` (the training job
gives the DataModule: ``kgs.graph(kg)``, ``kgs.index(kg)``); nothing graph-sized is saved in a checkpoint. With
``subgraph.max_triplets`` set, each question reads only the subgraph the GLM reads (GLM-RAG §5.5, Table 3;
:func:`question_subgraphs`), entities outside it get ``-inf``, and the loss is normalised over it (App. B.2).
With ``prior`` set (glmrag's, not in the papers), the logits are :mod:`glmrag.nn.prior`'s plus the GNN's
correction; entities outside a restricted subgraph keep their prior logit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from glmrag.data.types import Question
from glmrag.datamodules.glm_inputs import SubgraphSettings
from glmrag.datamodules.gnn_batches import QACollate, QARecord
from glmrag.datamodules.kg_source import GraphSource, source_settings
from glmrag.graph.subgraph import MAX_HOPS, Subgraph, select_subgraph
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.kg import KGIndex
from glmrag.io import load_checkpoint_dict
from glmrag.models.checkpointing import CheckpointMismatchError
from glmrag.models.gfmrag_folder import GFMRAGFolder, read_gfmrag_folder
from glmrag.models.losses import gfm_rag_loss, passage_list_ce
from glmrag.models.retriever_module import (
    Evaluation,
    LossWeights,
    RetrieverModule,
    Scores,
    prior_settings,
    typed_settings,
)
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.graph_inputs import GraphInputs
from glmrag.nn.kgc import ADVERSARIAL_TEMPERATURE, NUM_NEGATIVES, kgc_loss, sample_kgc_batch
from glmrag.nn.prior import EntityPrior, PriorSettings, gold_passage_mask, passage_entity_matrix, passage_logits
from glmrag.nn.subgraph_batch import SubgraphBatch

STAGES = ("qa", "kgc")
LEARNING_RATE = 5e-4
"""GLM-RAG Table 14, GFM-RAG fine-tuning: AdamW, lr 5e-4 (also GFM-RAG's pretraining lr)."""


@dataclass
class GNNSubgraph:
    """``model.subgraph`` of a GNN: with ``max_triplets`` null (the default) it reads the whole KG, as GFM-RAG;
    else each question's budgeted subgraph, selected as the GLM's (GLM-RAG §5.5, App. B.2)."""

    max_hops: int = MAX_HOPS
    """BFS depth around the question's entities (GLM-RAG App. B.2: 2); unused for the whole KG."""
    max_triplets: int | None = None
    """Triple budget of the subgraph (GLM-RAG App. B.2: 600); null: the whole KG."""
    seed: int = 0
    """Seed of the randomized BFS, mixed with the question id (as :class:`SubgraphSettings`)."""

    def __post_init__(self) -> None:
        SubgraphSettings.check_budget("max_triplets", self.max_triplets, allow_none=True)
        SubgraphSettings.check_budget("max_hops", self.max_hops)

    def restriction(self) -> SubgraphSettings | None:
        """The subgraph each question reads, or None for the whole KG."""
        return None if self.max_triplets is None else SubgraphSettings(**asdict(self))


@dataclass
class KGCSettings:
    """KG-completion pretraining (``stage="kgc"``; GFM-RAG stage 2, :mod:`glmrag.nn.kgc`)."""

    num_negatives: int = NUM_NEGATIVES
    """Strict negatives per query (GFM-RAG: 256)."""
    adversarial_temperature: float = ADVERSARIAL_TEMPERATURE
    """Temperature of the self-adversarial negative weights (GFM-RAG: 1)."""
    hide_target_edges: bool = True
    """Hide the batch's target edges from message passing (GFM-RAG's ``remove_easy_edges``, from NBFNet/ULTRA);
    false keeps them visible (``docs/fidelity.md``)."""

    def __post_init__(self) -> None:
        if isinstance(self.num_negatives, bool) or not isinstance(self.num_negatives, int) or self.num_negatives < 1:
            raise ValueError(f"kgc.num_negatives must be an integer >= 1, got {self.num_negatives!r}")
        if not self.adversarial_temperature > 0:
            raise ValueError(f"kgc.adversarial_temperature must be > 0, got {self.adversarial_temperature!r}")
        if not isinstance(self.hide_target_edges, bool):
            raise ValueError(f"kgc.hide_target_edges must be true or false, got {self.hide_target_edges!r}")


def gnn_subgraph(value: GNNSubgraph | SubgraphSettings | Mapping[str, Any] | None) -> GNNSubgraph:
    """``model.subgraph`` of a GNN as :class:`GNNSubgraph` (a GLM's :class:`SubgraphSettings` by its three)."""
    if isinstance(value, SubgraphSettings):
        value = {f.name: getattr(value, f.name) for f in fields(GNNSubgraph)}
    return typed_settings(GNNSubgraph, value, "model.subgraph")


def init_weights(ckpt_path: str, config: GNNConfig, own: Mapping[str, torch.Tensor] | None = None) -> dict:
    """The GNN weights (``gnn.`` keys, prefix removed) of ``model.init_from=ckpt_path``, checked to fit a
    :class:`~glmrag.nn.gnn.QueryGNN` of ``config`` (``own``: its state dict, built when None).

    ``ckpt_path`` is a checkpoint of this module, or a GFM-RAG checkpoint folder (``model.pth`` and
    ``config.json``, read by :func:`~glmrag.models.gfmrag_folder.read_gfmrag_folder`): its weights under glmrag's
    names. A file in another layout, without GNN weights or with weights of other sizes is a
    :class:`CheckpointMismatchError` that names it; the training job checks this before any work.
    """
    key = f"model.init_from={ckpt_path}"
    if Path(ckpt_path).expanduser().is_dir():
        folder = read_gfmrag_folder(ckpt_path, "model.init_from")
        state, fix = folder.state_dict, _gfmrag_fix(folder)
    else:
        ckpt = load_checkpoint_dict(ckpt_path, "model.init_from")
        if not isinstance(ckpt.get("state_dict"), Mapping):
            if "model" in ckpt:
                raise CheckpointMismatchError(
                    f"{key} holds GFM-RAG's layout ({{'model': state_dict}}, its model.pth): give the folder that "
                    "holds it and its config.json, model.init_from=<folder>"
                )
            raise CheckpointMismatchError(
                f"{key} holds no state_dict, not a checkpoint train.py wrote; give a .ckpt of a GNN run"
            )
        state = {k.removeprefix("gnn."): v for k, v in ckpt["state_dict"].items() if k.startswith("gnn.")}
        if not state:
            raise CheckpointMismatchError(f"{key} holds no GNN weights (no 'gnn.' keys): give a GNN run's checkpoint")
        fix = "set model.gnn to the checkpoint's sizes"
    own = QueryGNN(config).state_dict() if own is None else own
    wrong = [f"gnn.{k} has shape {tuple(v.shape)} there, {tuple(own[k].shape)} here"
             for k, v in state.items() if k in own and v.shape != own[k].shape]  # fmt: skip
    wrong += [f"gnn.{k} is missing there" for k in own if k not in state]
    wrong += [f"gnn.{k} is there but not in this model" for k in state if k not in own]
    if wrong:
        raise CheckpointMismatchError(
            f"{key} holds another GNN than model.gnn ({config.hidden_channels} channels, {config.num_layers} "
            f"layers): {wrong[0]}; {fix}"
        )
    return state


def _gfmrag_fix(folder: GFMRAGFolder) -> str:
    """The settings that build a GNN of a GFM-RAG folder's sizes, and its encoder."""
    gnn = folder.gnn
    return (
        f"set model.gnn.hidden_channels={gnn.hidden_channels} model.gnn.num_layers={gnn.num_layers} "
        "model.gnn.use_node_features=false and embed with the folder's encoder "
        f"{folder.encoder} ({gnn.question_dim}-d; config.json's text_emb_model_config), e.g. "
        "index.embed_model=offline:all-mpnet-base-v2 index.embed_dim=768 for all-mpnet-base-v2"
    )


def default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW at lr 5e-4 (GLM-RAG Table 14)."""
    return torch.optim.AdamW(params, lr=LEARNING_RATE)


def question_subgraphs(index: KGIndex, question_ids: Sequence[str], settings: SubgraphSettings) -> list[Subgraph]:
    """Each question's budgeted subgraph, selected exactly as the GLM's records select it.

    The call and its arguments are :func:`glmrag.datamodules.glm_inputs.question_record`'s: the question's
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
        gnn: the GNN's architecture, :class:`~glmrag.nn.gnn.GNNConfig` (or a mapping of its fields).
        subgraph: ``max_hops``, ``max_triplets``, ``seed``: restrict each question to the subgraph the GLM reads
            (GLM-RAG §5.5, Table 3; selection App. B.2); ``max_triplets`` null: the whole KG (GFM-RAG).
        loss: :class:`~glmrag.models.retriever_module.LossWeights` (GFM-RAG: 0.3 BCE, 0.7 ListCE, 0.2).
        kgc: :class:`KGCSettings` of the KG-completion stage.
        evaluation: :class:`~glmrag.models.retriever_module.Evaluation` (ks, ranker, top_entities).
        prior: :class:`~glmrag.nn.prior.PriorSettings` (the prior the GNN corrects; rank with
            ``evaluation.ranker=softmax_sum``); None: the GNN's logits alone (GFM-RAG).
        stage: ``qa`` (fine-tuning) or ``kgc`` (KG-completion pretraining on the DataModule's triple batches,
            ``task="kgc"``); validation is QA retrieval in both.
        embed_model: sentence encoder of questions and relations; checked against the KG source's settings.
        init_from: a checkpoint of this module (e.g. the ``kgc`` stage) whose GNN weights start ``fit``, or a
            GFM-RAG checkpoint folder (``model.pth``, ``config.json``; :func:`init_weights`). The weights then
            train on glmrag's graph: glmrag's edge direction and ``inverse <r>`` texts, not GFM-RAG's
            (:mod:`glmrag.nn.gfmrag_weights`), so the first step does not start from GFM-RAG's scores.
        kgs: the :class:`~glmrag.datamodules.kg_source.GraphSource` the steps read each KG from (the DataModule in the
            training job); not a hyper-parameter. Needed by the steps, not by :meth:`forward`.
        optimizer: ``params -> Optimizer`` (Hydra ``_partial_: true``); None: AdamW lr 5e-4.
        scheduler: ``optimizer -> LRScheduler`` (``_partial_: true``), stepped per epoch on ``val/loss``; or None.
    """

    SETTINGS = {
        "gnn": functools.partial(typed_settings, GNNConfig, key="model.gnn"),
        "subgraph": gnn_subgraph,
        "loss": functools.partial(typed_settings, LossWeights, key="model.loss"),
        "kgc": functools.partial(typed_settings, KGCSettings, key="model.kgc"),
        "evaluation": functools.partial(typed_settings, Evaluation, key="model.evaluation"),
        "prior": prior_settings,
    }
    """Each settings node's conversion (what ``__init__`` does; ``glmrag.jobs.config_check`` runs it early)."""

    def __init__(
        self,
        gnn: GNNConfig | Mapping[str, Any] | None = None,
        subgraph: SubgraphSettings | Mapping[str, Any] | None = None,
        loss: LossWeights | Mapping[str, Any] | None = None,
        kgc: KGCSettings | Mapping[str, Any] | None = None,
        evaluation: Evaluation | Mapping[str, Any] | None = None,
        prior: PriorSettings | Mapping[str, Any] | None = None,
        stage: str = "qa",
        embed_model: str = DEFAULT_MODEL,
        init_from: str | None = None,
        optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
        scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
        kgs: GraphSource | None = None,
    ) -> None:
        super().__init__()
        self.kgs = kgs
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        config = self.SETTINGS["gnn"](gnn)
        subgraph = self.SETTINGS["subgraph"](subgraph)
        self.subgraph_settings = subgraph.restriction()
        self.loss_weights = self.SETTINGS["loss"](loss)
        self.kgc = self.SETTINGS["kgc"](kgc)
        self.init_evaluation(self.SETTINGS["evaluation"](evaluation))
        prior = self.SETTINGS["prior"](prior)
        # Plain values only (no optimizer or scheduler factory, no kgs), so a checkpoint loads with weights_only=True.
        self.save_hyperparameters(
            {
                "gnn": asdict(config),
                "subgraph": asdict(subgraph),
                "loss": asdict(self.loss_weights),
                "kgc": asdict(self.kgc),
                "evaluation": asdict(self.evaluation),
                "prior": None if prior is None else asdict(prior),
                "stage": stage,
                "embed_model": embed_model,
                "init_from": init_from,
            },
            logger=False,
        )
        self.optimizer_factory = optimizer or default_optimizer
        self.scheduler_factory = scheduler
        self.gnn = QueryGNN(config)
        self.prior = None if prior is None else EntityPrior(prior)
        if self.prior is not None:
            last = self.gnn.readout[-1]  # the correction starts at zero (glmrag.nn.prior)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
        if stage == "kgc":
            for module in [*self.gnn.kgc_unused(), *([self.prior] if self.prior is not None else [])]:
                module.requires_grad_(False)
        self.loss_fn = functools.partial(gfm_rag_loss, **self.loss_weights.entity_loss)
        # Per-KG caches: each saves a KG-sized host-to-device copy (graph, passage embeddings) or a build from the
        # index (the passage-entity CSR, the BFS subgraph selection) that every step of the KG would repeat.
        self._graphs: dict[tuple[str, torch.device], GraphInputs] = {}
        self._passages: dict[tuple[str, torch.device], torch.Tensor] = {}
        self._passage_emb: dict[tuple[str, torch.device], torch.Tensor] = {}
        self._subgraphs: dict[tuple[str, str], Subgraph] = {}

    @property
    def config(self) -> GNNConfig:
        """The GNN's architecture."""
        return self.gnn.config

    # -- the KGs, from the source given at construction --

    def setup(self, stage: str) -> None:
        """Check the KG source (:meth:`check_kgs`) and, for ``fit``, load ``init_from``."""
        self._graphs.clear()
        self._subgraphs.clear()
        self._passages.clear()
        self._passage_emb.clear()
        self.reset_metrics(stage)
        self.check_kgs(stage)
        if stage == "fit" and self.hparams.init_from:
            self.load_gnn_weights(self.hparams.init_from)

    def check_kgs(self, stage: str) -> None:
        """Refuse a KG source without the methods this module reads (``graph``, ``index``; ``passage_embeddings``
        for a prior's dense term), or whose settings (a DataModule's hyper-parameters) embed with another model,
        lack the node features the GNN reads, or, for ``fit``, serve another task than this module's stage."""
        reads = ["graph", "index", *(["passage_embeddings"] if self.has_dense_term else [])]
        kgs = self.checked_kg_source(reads, "a KGQADataModule")
        dm_hp = source_settings(kgs)
        if dm_hp.get("embed_model", self.hparams.embed_model) != self.hparams.embed_model:
            raise ValueError(
                f"the DataModule embeds with {dm_hp['embed_model']!r} but the model expects "
                f"{self.hparams.embed_model!r}; set model.embed_model to index.embed_model"
            )
        if self.config.use_node_features and not dm_hp.get("node_features", True):
            raise ValueError("model.gnn.use_node_features=true needs node features: set datamodule.node_features=true")
        if stage == "fit" and dm_hp.get("task", self.hparams.stage) != self.hparams.stage:
            raise ValueError(
                f"model.stage={self.hparams.stage!r} but datamodule.task={dm_hp['task']!r}; set both to the same stage"
            )

    def load_gnn_weights(self, ckpt_path: str) -> None:
        """Copy the GNN weights of a checkpoint of this module (any stage) or of a GFM-RAG checkpoint folder into
        ``self.gnn`` (strict), as :func:`init_weights` checks them."""
        self.gnn.load_state_dict(init_weights(ckpt_path, self.config, self.gnn.state_dict()))

    def graph(self, kg: str) -> GraphInputs:
        """The source's GNN inputs of ``kg``, moved to this module's device once."""
        key = (kg, self.device)
        if key not in self._graphs:
            self._graphs[key] = self.kg_source().graph(kg).to(self.device)
        return self._graphs[key]

    def index(self, kg: str) -> KGIndex:
        """The source's index of ``kg``."""
        return self.kg_source().index(kg)

    def passage_entities(self, kg: str) -> torch.Tensor:
        """(P, E) sparse CSR of which entities each passage of ``kg`` mentions, on this module's device (the
        passage ListCE's; built once per KG)."""
        key = (kg, self.device)
        if key not in self._passages:
            self._passages[key] = passage_entity_matrix(self.index(kg)).to(self.device)
        return self._passages[key]

    def gold_passages(self, kg: str, gold: Sequence[Sequence[str]]) -> torch.Tensor:
        """Shapes: ``gold`` B lists of passage ids -> (B, P) bool, True at each question's gold passages."""
        return gold_passage_mask(self.index(kg), gold).to(self.device)

    def subgraphs(self, kg: str, question_ids: Sequence[str]) -> SubgraphBatch | None:
        """The questions' subgraphs in the source's index of ``kg``, on this module's device; None when
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
        """Entity logits of a batch of questions on one KG; ``-inf`` outside each question's subgraph, or with a
        prior, the prior's logit there (the correction is zero outside the subgraph).

        A module with ``subgraph.max_triplets`` set needs the questions' ``subgraphs`` (:meth:`subgraphs`, or
        :func:`subgraph_batch` of :func:`question_subgraphs` without a KG source).

        Shapes: **question_emb** ``(B, question_dim)``, **seed_weight** ``(B, E)`` -> ``(B, E)``.
        """
        if (subgraphs is None) != (self.subgraph_settings is None):
            raise ValueError(
                f"this GNN has subgraph.max_triplets={self.hparams.subgraph['max_triplets']}: pass subgraphs exactly "
                "when it is set "
                "(GNNRetrieverModule.subgraphs(kg, question_ids) builds them)"
            )
        logits = self.gnn(graph, question_emb, seed_weight, subgraphs=subgraphs)  # (B, E)
        if self.prior is None:
            return logits
        correction = torch.where(torch.isfinite(logits), logits, torch.zeros_like(logits))  # (B, E)
        return self.prior(graph, seed_weight) + correction

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
        # With a prior every entity is scored, inside the subgraph or not.
        restricted = subgraphs is not None and self.prior is None
        mask = subgraphs.entity_mask(graph.num_nodes)[real] if restricted else None  # (B', E)
        weights, terms = self.loss_weights, []  # each term is 0 (attached) when no row is real
        if weights.bce_weight + weights.listce_weight:
            terms.append(self.loss_fn(logits[real], batch["target"][real], mask))
        if weights.passage_weight:
            gold = self.gold_passages(batch["kg"], batch["gold"])[real]  # (B', P)
            scores = self.passage_logits(batch["kg"], logits[real], batch["question_emb"][real])  # (B', P)
            terms.append(weights.passage_weight * passage_list_ce(scores, gold))
        return sum(terms[1:], terms[0]), logits

    @property
    def has_dense_term(self) -> bool:
        """Whether passages are scored with a prior's dense term (``prior.dense_weight``), not by a ranker."""
        return self.prior is not None and self.prior.dense_weight is not None

    def passage_logits(self, kg: str, logits: torch.Tensor, question_emb: torch.Tensor) -> torch.Tensor:
        """Passage logits from entity logits (:func:`glmrag.nn.prior.passage_logits`), with the prior's dense
        term when it has one. Shapes: **logits** ``(B, E)``, **question_emb** ``(B, d)`` -> ``(B, P)``."""
        if not self.has_dense_term:
            return passage_logits(logits, self.passage_entities(kg))
        key = (kg, self.device)  # moved to the device once, not every step
        if key not in self._passage_emb:
            self._passage_emb[key] = self.kg_source().passage_embeddings(kg).to(self.device)
        passage_emb = self._passage_emb[key]  # (P, d)
        return passage_logits(logits, self.passage_entities(kg), self.prior.dense_weight, question_emb, passage_emb)

    def kgc_step(self, batch: dict[str, Any]) -> torch.Tensor:
        """KG-completion loss of a batch of triples of one KG (GFM-RAG pretraining).

        :func:`sample_kgc_batch` turns each of the batch's ``triples`` (B, 3) into one query (the
        DataLoader already shuffles and batches them, so an epoch sees every triple once), with strict
        negatives; its generator is seeded by the global step and rank, so a resumed run draws the same.
        """
        graph = self.graph(batch["kg"])
        generator = torch.Generator().manual_seed(1_000_003 * self.global_step + self.global_rank)
        triples = batch["triples"]
        kgc = sample_kgc_batch(graph, triples, None, self.kgc.num_negatives, generator, self.kgc.hide_target_edges)
        return kgc_loss(self.gnn, graph, kgc, self.kgc.adversarial_temperature)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.hparams.stage != "kgc":
            return super().training_step(batch, batch_idx)
        loss = self.kgc_step(batch)
        self.log_train_loss(loss, len(batch["triples"]))
        return loss

    def score(self, batch: dict[str, Any], logits: torch.Tensor | None = None) -> list[Scores]:
        """The logits of every entity of the batch's KG and, with a prior's dense term, the fused passage logits
        (:meth:`passage_logits`), which rank the passages instead of the document ranker.

        Shapes: **logits** ``(B, E)`` -> entities ``(B, E)`` float32, passages ``(B, P)`` or None.
        """
        kg = batch["kg"]
        if logits is None:
            subgraphs = self.subgraphs(kg, batch["question_ids"])
            logits = self(self.graph(kg), batch["question_emb"], batch["seed_weight"], subgraphs)  # (B, E)
        passages = None
        if self.has_dense_term:
            passages = self.passage_logits(kg, logits, batch["question_emb"]).cpu().numpy()  # (B, P)
        return [Scores(self.index(kg), list(range(len(logits))), logits.float().cpu().numpy(), passages)]

    def question_batch(self, questions: Sequence[Question], kg: str, question_emb: np.ndarray) -> dict[str, Any]:
        """The QA batch of ``questions`` (:class:`~glmrag.datamodules.gnn_batches.QACollate`, as in validation), without
        target entities (:meth:`score` does not read them). Shapes: **question_emb** ``(Q, d)``."""
        emb = torch.from_numpy(np.asarray(question_emb, dtype=np.float32))  # (Q, d)
        records = [QARecord(kg, q.id, (), tuple(q.supporting), e) for q, e in zip(questions, emb, strict=True)]
        return QACollate({kg: self.index(kg)}, {}, train=False)([(r, False) for r in records])
