"""The GLM retriever as a LightningModule (GLM-RAG, the project's main method).

A :class:`~glmrag.nn.glm_retriever.GLMRetriever` scores the entity nodes of each question's budgeted
subgraph (:mod:`glmrag.datamodules.subgraph_data` streams them). Loss (GLM-RAG App. B, B.2): 0.56 x masked ListCE
over the subgraph's entity nodes plus 0.44 x GFM-RAG's weighted BCE over the same nodes. Optimiser (Table 14):
AdamW, lr 5e-4 for the head and 1e-4 for the T5 backbone. :meth:`GLMRetrieverModule.score` scatters the node
logits over the KG's entities (``-inf`` outside the subgraph), and passages are ranked as the GNN ranks them
(:meth:`~glmrag.models.retriever_module.RetrieverModule.rank`, in validation, test and the checkpoint retriever).

With ``prior`` set (glmrag's, not in the papers; :mod:`glmrag.nn.prior`), every entity of the KG scores
``w log p(e | q)`` (HippoRAG's PPR) plus, inside the question's subgraph, the GLM's logit, whose last layer starts
at zero: the untrained GLM ranks as the prior does, as the GNN with a prior does (``experiment=cpu_2wiki``). The
entity losses then read the fused logits of the subgraph's entity nodes, and ``loss.passage_weight`` adds the
passage ListCE over the fused passage logits (with ``prior.dense_weight``: entity mass and dense cosine).

Settings nodes: ``glm`` (:class:`GLMConfig`), ``subgraph`` (:class:`~glmrag.datamodules.glm_inputs.SubgraphSettings`:
the DataModule must build the same, checked in ``setup``), ``loss``, ``lr`` (:class:`LearningRates`),
``evaluation`` and ``prior``. A step reads its batch and, for the ranking and a prior, each KG's index (and a dense
term's passage embeddings) from the :class:`~glmrag.datamodules.kg_source.KGSource` given as ``kgs`` (the DataModule in
the training job). Three rules not in GLM-RAG follow the GLM authors' code (Plenz & Frank 2024), the
old ones kept as options: ``subgraph.position_conflict``, ``subgraph.question_eos``, ``lr.buckets``
(docs/fidelity.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import AutoConfig, MPNetConfig, T5Config

from glmrag.data.types import Question
from glmrag.datamodules.glm_inputs import GLMCollate, SubgraphSettings, load_tokenizer, question_record
from glmrag.datamodules.kg_source import KGSource, source_settings
from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path
from glmrag.index.kg import KGIndex
from glmrag.models.losses import gfm_rag_loss, passage_list_ce
from glmrag.models.retriever_module import (
    Evaluation,
    LossWeights,
    RetrieverModule,
    Scores,
    prior_settings,
    typed_settings,
)
from glmrag.nn.glm import ATTENTIONS, BACKENDS, GraphEncoder, T5GLMEncoder
from glmrag.nn.glm_mpnet import ABSOLUTE_POSITIONS, MPNetGLMEncoder
from glmrag.nn.glm_retriever import AGGREGATIONS, GLMInputs, GLMRetriever
from glmrag.nn.graph_inputs import seed_weights
from glmrag.nn.prior import EntityPrior, PriorKG, PriorSettings, gold_passage_mask, passage_logits, prior_kg

HEAD_LR = 5e-4
"""GLM-RAG Table 14: learning rate of the entity scorer and question projection."""
BACKBONE_LR = 1e-4
"""GLM-RAG Table 14: learning rate of the T5 backbone."""
BUCKET_LRS = ("backbone", "head")
"""Which learning rate the GLM's extra buckets take (not in GLM-RAG; ``backbone`` as the GLM reference code)."""
BACKBONES = {"t5": (T5GLMEncoder, T5Config), "mpnet": (MPNetGLMEncoder, MPNetConfig)}
"""``model.glm.backbone``: each GLM encoder class and the config class of its random ``encoder_config``."""


@dataclass
class GLMConfig:
    """The GLM encoder and its scoring head."""

    encoder: str = "t5-base"
    """The pretrained encoder: ``t5-small``, ``t5-base``, ``t5-large`` (GLM-RAG Fig. 6, Table 18), an MPNet
    (``offline:all-mpnet-base-v2``, glmrag's offline backbone) or a folder."""
    encoder_config: Any = None
    """Instead of ``encoder``, a randomly initialised encoder with these config fields (a mapping: ``T5Config``'s,
    or ``MPNetConfig``'s for ``backbone: mpnet``; no hub needed: the offline demo, the tests); ``vocab_size``
    defaults to the tokenizer's. Typed ``Any``, so a config node may be an interpolation that composition
    leaves unresolved (``${capacity_pairs.${capacity}.encoder_config}``: a typed dict is resolved on merge)."""
    backbone: str | None = None
    """``t5`` (GLM-RAG) or ``mpnet`` (:mod:`glmrag.nn.glm_mpnet`); None: read from the pretrained model's config
    (``model_type``), ``t5`` for an ``encoder_config``."""
    tokenizer: str | None = None
    """Tokenizer of the subgraphs; None: ``encoder``'s."""
    attention: str = "global"
    """``global`` (GLM-RAG App. B default) or ``local`` GLM (:data:`~glmrag.nn.glm.ATTENTIONS`)."""
    aggregation: str = "mean"
    """Node pooling of a node's tokens: ``mean`` | ``first`` | ``last`` (GLM-RAG Table 15)."""
    query_interaction: bool = True
    """Multiply node embeddings by the projected question embedding (GLM-RAG App. D, Table 15: on)."""
    question_dim: int = 384
    """Size of the question sentence embedding (384: all-MiniLM-L6-v2; 768: all-mpnet-base-v2, Table 14)."""
    backend: str = "eager"
    """Attention backend, ``eager`` or ``flex`` (FlexAttention; :mod:`glmrag.nn.glm`)."""
    gradient_checkpointing: bool = False
    """Recompute encoder layers in the backward pass (less activation memory, more compute)."""
    absolute_positions: str = "sentence"
    """MPNet only (T5 has no absolute positions): each graph token's absolute position, ``sentence`` |
    ``sequence`` | ``constant`` (:func:`~glmrag.nn.glm_mpnet.absolute_positions`; not in GLM-RAG)."""
    frozen_layers: int = 0
    """Freeze the token embeddings and this many of the lowest encoder layers (0: train all, as GLM-RAG);
    backpropagation stops above them (the CPU recipe)."""

    def __post_init__(self) -> None:
        if self.tokenizer is None:
            self.tokenizer = self.encoder
        if self.encoder_config is not None:
            self.encoder_config = dict(self.encoder_config)  # a plain dict in the checkpoint
        if self.attention not in ATTENTIONS:
            raise ValueError(f"glm.attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"glm.aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"glm.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backbone is not None and self.backbone not in BACKBONES:
            raise ValueError(f"glm.backbone must be one of {tuple(BACKBONES)} or null, got {self.backbone!r}")
        if self.absolute_positions not in ABSOLUTE_POSITIONS:
            raise ValueError(
                f"glm.absolute_positions must be one of {ABSOLUTE_POSITIONS}, got {self.absolute_positions!r}"
            )
        if isinstance(self.frozen_layers, bool) or not isinstance(self.frozen_layers, int) or self.frozen_layers < 0:
            raise ValueError(f"glm.frozen_layers must be an integer >= 0, got {self.frozen_layers!r}")
        if isinstance(self.question_dim, bool) or not isinstance(self.question_dim, int) or self.question_dim < 1:
            raise ValueError(f"glm.question_dim must be an integer >= 1, got {self.question_dim!r}")
        for name in ("query_interaction", "gradient_checkpointing"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"glm.{name} must be true or false, got {getattr(self, name)!r}")


@dataclass
class LearningRates:
    """AdamW's two parameter groups (GLM-RAG Table 14) and where the extra buckets go."""

    head: float = HEAD_LR
    """Entity scorer and question projection (GLM-RAG Table 14: 5e-4)."""
    backbone: float = BACKBONE_LR
    """The T5 backbone (GLM-RAG Table 14: 1e-4)."""
    buckets: str = "backbone"
    """The three extra attention buckets train at the ``backbone`` rate (GLM reference code: they are rows of T5's
    bias table) or at the ``head`` rate; not in GLM-RAG."""
    prior: float | None = None
    """A prior's two scalars, its weight ``w`` and dense weight ``b`` (``model.prior``; glmrag's): None trains them
    at the ``head`` rate; experiment=cpu_2wiki trains the same two scalars at 5e-3."""

    def __post_init__(self) -> None:
        if self.buckets not in BUCKET_LRS:
            raise ValueError(f"lr.buckets must be one of {BUCKET_LRS}, got {self.buckets!r}")
        rates = {"head": self.head, "backbone": self.backbone} | ({} if self.prior is None else {"prior": self.prior})
        for name, value in rates.items():  # 0: no change (the untrained twin of train_glm_2wiki_cpu.sh)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"lr.{name} must be a finite number >= 0, got {value!r}")


@dataclass
class GLMLossWeights(LossWeights):
    """The GLM's loss: GLM-RAG App. B, 0.56 masked ListCE + 0.44 BCE (GFM-RAG's temperature 0.2)."""

    bce_weight: float = 0.44
    listce_weight: float = 0.56


class GLMRetrieverModule(RetrieverModule):
    """Trains the GLM retriever.

    Args:
        glm: the encoder and head, :class:`GLMConfig` (or a mapping of its fields).
        subgraph: how each question's subgraph is built, :class:`SubgraphSettings` (GLM-RAG App. B.2: 2 hops,
            600 triplets; ``layout=linear`` is Table 15's baseline).
        loss: :class:`GLMLossWeights` (GLM-RAG App. B; a :class:`~glmrag.models.retriever_module.LossWeights`).
        lr: :class:`LearningRates` of the head, the backbone and the extra buckets (GLM-RAG Table 14).
        evaluation: :class:`~glmrag.models.retriever_module.Evaluation` (ks, ranker, top_entities).
        prior: :class:`~glmrag.nn.prior.PriorSettings`, or None (GLM-RAG's GLM): the logits are the prior's
            plus the GLM's, which start at zero (module docstring).
        embed_model: sentence encoder of the question embeddings; checked against the KG source's settings.
        optimizer: ``params -> Optimizer`` (Hydra ``_partial_: true``) given two parameter groups with their
            lr; None: AdamW. scheduler: ``optimizer -> LRScheduler`` or None.
        kgs: the :class:`~glmrag.datamodules.kg_source.KGSource` the steps read each KG's index (and a dense prior's
            passage embeddings) from: the DataModule in the training job; not a hyper-parameter.
    """

    SETTINGS = {
        "glm": functools.partial(typed_settings, GLMConfig, key="model.glm"),
        "subgraph": functools.partial(typed_settings, SubgraphSettings, key="model.subgraph"),
        "loss": functools.partial(typed_settings, GLMLossWeights, key="model.loss"),
        "lr": functools.partial(typed_settings, LearningRates, key="model.lr"),
        "evaluation": functools.partial(typed_settings, Evaluation, key="model.evaluation"),
        "prior": prior_settings,
    }
    """Each settings node's conversion (what ``__init__`` does; ``glmrag.jobs.config_check`` runs it early)."""

    def __init__(
        self,
        glm: GLMConfig | Mapping[str, Any] | None = None,
        subgraph: SubgraphSettings | Mapping[str, Any] | None = None,
        loss: LossWeights | Mapping[str, Any] | None = None,
        lr: LearningRates | Mapping[str, Any] | None = None,
        evaluation: Evaluation | Mapping[str, Any] | None = None,
        prior: PriorSettings | Mapping[str, Any] | None = None,
        embed_model: str = DEFAULT_MODEL,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
        kgs: KGSource | None = None,
    ) -> None:
        super().__init__()
        self.kgs = kgs
        self.config = config = self.SETTINGS["glm"](glm)
        self.settings = self.SETTINGS["subgraph"](subgraph)
        self.loss_weights = self.SETTINGS["loss"](loss)
        self.learning_rates = self.SETTINGS["lr"](lr)
        self.init_evaluation(self.SETTINGS["evaluation"](evaluation))
        prior = self.SETTINGS["prior"](prior)
        # Plain values only (no optimizer or scheduler factory, no kgs), so a checkpoint loads with weights_only=True.
        self.save_hyperparameters(
            {
                "glm": asdict(config),
                "subgraph": asdict(self.settings),
                "loss": asdict(self.loss_weights),
                "lr": asdict(self.learning_rates),
                "evaluation": asdict(self.evaluation),
                "prior": None if prior is None else asdict(prior),
                "embed_model": embed_model,
            },
            logger=False,
        )
        self.optimizer_factory = optimizer or torch.optim.AdamW
        self.scheduler_factory = scheduler

        self.net = GLMRetriever(glm_encoder(config), config.question_dim, config.aggregation, config.query_interaction)
        self.prior = None if prior is None else EntityPrior(prior)
        if self.prior is not None:
            last = self.net.scorer[-1]  # the correction starts at zero (glmrag.nn.prior)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
        elif self.loss_weights.passage_weight:
            raise ValueError(
                "model.loss.passage_weight scores the fused passage logits of a prior: without model.prior the "
                "GLM ranks passages from its subgraph's entities alone; set model.prior or passage_weight 0"
            )
        self.loss_fn = functools.partial(gfm_rag_loss, **self.loss_weights.entity_loss)
        self.prior_kgs: dict[tuple[str, torch.device], PriorKG] = {}
        """Each KG's :class:`~glmrag.nn.prior.PriorKG` on a device (:meth:`prior_kg`): the walk and the
        passage-entity matrix are built from the index, which every step of the KG would otherwise repeat."""

    def setup(self, stage: str) -> None:
        """Check the KG source (:meth:`check_kgs`)."""
        self.reset_metrics(stage)
        self.prior_kgs.clear()
        self.check_kgs()

    def check_kgs(self) -> None:
        """Refuse a KG source without the methods this module reads (``index``; ``passage_embeddings`` for a
        prior's dense term), or one (a SubgraphDataModule) that builds other subgraphs, tokenizes or embeds
        otherwise than this module."""
        reads = ["index", *(["passage_embeddings"] if self.has_dense_term else [])]
        dm = self.checked_kg_source(reads, "a SubgraphDataModule")
        theirs = getattr(dm, "settings", None)
        if isinstance(theirs, SubgraphSettings):
            ours = self.subgraph_settings()
            for name, value in asdict(ours).items():
                if getattr(theirs, name) != value:
                    raise ValueError(
                        f"the DataModule has {name}={getattr(theirs, name)!r} but the model {getattr(ours, name)!r}; "
                        "build the DataModule with subgraph=model.hparams.subgraph (train.py passes model.subgraph)"
                    )
        dm_hp = source_settings(dm)
        ours = {"tokenizer": (self.config.tokenizer, "model.glm.tokenizer")}
        ours["embed_model"] = (self.hparams.embed_model, "model.embed_model")
        for name, (value, key) in ours.items():
            if name in dm_hp and dm_hp[name] != value:
                raise ValueError(
                    f"the DataModule has {name}={dm_hp[name]!r} but the model {value!r}; "
                    f"set datamodule.{name}: ${{{key}}}"
                )

    def subgraph_settings(self) -> SubgraphSettings:
        """How this module's subgraphs are built: the DataModule must build the same (checked in :meth:`setup`),
        and :meth:`question_batch` builds them at inference."""
        return self.settings

    @functools.cached_property
    def tokenizer(self):
        """The tokenizer of the subgraphs (``glm.tokenizer``), loaded on first use (:meth:`question_batch`)."""
        return load_tokenizer(self.config.tokenizer)

    def question_batch(self, questions: Sequence[Question], kg: str, question_emb: np.ndarray) -> dict[str, Any]:
        """The batch of ``questions`` as the SubgraphDataModule serves it: their records
        (:func:`~glmrag.datamodules.glm_inputs.question_record`, this module's subgraph settings and tokenizer)
        padded by :class:`~glmrag.datamodules.glm_inputs.GLMCollate`. Shapes: **question_emb** ``(Q, d)``."""
        index = self.kg_source().index(kg)
        records = [
            question_record(index, q, kg, self.tokenizer, self.settings, emb)
            for q, emb in zip(questions, question_emb, strict=True)
        ]
        return GLMCollate(self.settings.position_mode, position_conflict=self.settings.position_conflict)(records)

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Two AdamW groups: the head at ``lr.head``, the T5 backbone at ``lr.backbone`` (GLM-RAG Table 14).

        The extra buckets join the backbone group when ``lr.buckets`` is ``backbone``, the head's otherwise; a
        prior's weights (``w``, ``b``) are the head's, or a third group at ``lr.prior`` when it is set.
        """
        head = self.net.head_parameters()
        if self.learning_rates.buckets == "backbone":
            head = [p for p in head if p is not self.net.encoder.extra_bias]
        ids = {id(p) for p in head}
        backbone = [p for p in self.net.parameters() if id(p) not in ids]
        prior = [] if self.prior is None else list(self.prior.parameters())
        if self.learning_rates.prior is None:  # w and b train with the head
            head, prior = head + prior, []
        groups = [
            {"params": backbone, "lr": self.learning_rates.backbone, "name": "backbone"},
            {"params": head, "lr": self.learning_rates.head, "name": "head"},
        ]
        return groups + ([{"params": prior, "lr": self.learning_rates.prior, "name": "prior"}] if prior else [])

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
        if self.prior is not None:
            return self.prior_loss(batch, logits), logits
        if not mask.any():  # no real row with a scored entity: a zero that keeps the graph connected
            return logits.sum() * 0.0, logits
        loss = self.loss_fn(logits[real], batch["target"][real], mask)
        return loss, logits

    def prior_loss(self, batch: dict[str, Any], logits: torch.Tensor) -> torch.Tensor:
        """The loss of a model with a prior: the entity losses over each subgraph's entity nodes, as without a
        prior but on the fused logits, plus ``passage_weight`` x the passage ListCE of the fused passage logits;
        rows of each KG of the batch together, averaged over the real rows.

        Shapes: **logits** ``(B, N)`` node logits -> ().
        """
        real, weights = batch["real"].tolist(), self.loss_weights
        total, count = logits.sum() * 0.0, 0  # a zero attached to the graph when no row is real
        for kg, rows in kg_rows(batch["kg"], real).items():
            index, kg_tensors = self.kg_source().index(kg), self.prior_kg(kg)
            fused = self.fused_entity_logits(batch, logits, rows, index, kg_tensors)  # (b, E)
            node = batch["entity_of_node"][rows]  # (b, N)
            mask = batch["node_mask"][rows]  # (b, N)
            terms = []
            if weights.bce_weight + weights.listce_weight and mask.any():
                node_logits = fused.gather(1, node.clamp(min=0))  # (b, N): each entity node's fused logit
                terms.append(self.loss_fn(node_logits, batch["target"][rows], mask))
            if weights.passage_weight:
                gold = gold_passage_mask(index, [batch["gold"][r] for r in rows]).to(self.device)  # (b, P)
                scores = self.passage_scores(fused, kg_tensors, batch["question_emb"][rows])  # (b, P)
                terms.append(weights.passage_weight * passage_list_ce(scores, gold))
            total, count = total + len(rows) * sum(terms, logits.sum() * 0.0), count + len(rows)
        return total / max(count, 1)

    def prior_kg(self, kg: str) -> PriorKG:
        """The source's KG ``kg`` as the prior reads it (its walk, passage entities and, for a dense term,
        passage embeddings), on this module's device, built once."""
        key = (kg, self.device)
        if key not in self.prior_kgs:
            dm = self.kg_source()
            with torch.inference_mode(False):  # first asked for in a validation, it serves training too
                passage_emb = dm.passage_embeddings(kg).clone() if self.has_dense_term else None
                self.prior_kgs[key] = prior_kg(dm.index(kg), passage_emb).to(self.device)
        return self.prior_kgs[key]

    @property
    def has_dense_term(self) -> bool:
        """Whether passages are scored with a prior's dense term (``prior.dense_weight``), not by a ranker."""
        return self.prior is not None and self.prior.dense

    def fused_entity_logits(
        self, batch: dict[str, Any], logits: torch.Tensor, rows: list[int], index: KGIndex, kg: PriorKG
    ) -> torch.Tensor:
        """``w log p(e | q)`` of every entity plus the GLM's logit at each subgraph entity node, for the batch
        ``rows``, all of one KG: its ``index`` and its :class:`~glmrag.nn.prior.PriorKG`.

        Shapes: **logits** ``(B, N)`` node logits -> ``(len(rows), E)`` float32.
        """
        seeds = seed_weights(index, [batch["question_ids"][r] for r in rows]).to(self.device)  # (b, E)
        prior = self.prior.on_walk(kg.walk, seeds)  # (b, E)
        node_logits, node = logits[rows], batch["entity_of_node"][rows]  # (b, N) each
        row, col = batch["node_mask"][rows].nonzero(as_tuple=True)  # each entity node once (a Levi graph)
        correction = torch.zeros_like(prior).index_put((row, node[row, col]), node_logits[row, col].float())
        return prior + correction

    def passage_scores(self, entity_logits: torch.Tensor, kg: PriorKG, question_emb: torch.Tensor) -> torch.Tensor:
        """The fused passage logits of :func:`glmrag.nn.prior.passage_logits`, with the dense term when the prior
        has one. Shapes: **entity_logits** ``(b, E)``, **question_emb** ``(b, d)`` -> ``(b, P)``."""
        if not self.has_dense_term:
            return passage_logits(entity_logits, kg.passage_entities)
        weight = self.prior.dense_weight
        return passage_logits(entity_logits, kg.passage_entities, weight, question_emb, kg.passage_emb)

    def score(self, batch: dict[str, Any], logits: torch.Tensor | None = None) -> list[Scores]:
        """The scores of the batch's rows, per KG: the GLM's logit at each subgraph entity node and ``-inf``
        elsewhere, or with a prior the fused entity logits (:meth:`fused_entity_logits`) and, with its dense term,
        the fused passage logits (:meth:`passage_scores`), which rank the passages instead of the document ranker.

        Shapes: **logits** ``(B, N)`` node logits -> per KG entities ``(b, E)`` float64, passages ``(b, P)`` or None.
        """
        if logits is None:
            logits = self(GLMInputs.from_batch(batch)).float()  # (B, N)
        out = []
        for kg, rows in kg_rows(batch["kg"]).items():
            index = self.kg_source().index(kg)
            if self.prior is None:
                node_logits = logits[rows].float().cpu().numpy()  # (b, N)
                entity_of_node = batch["entity_of_node"][rows].cpu().numpy()  # (b, N)
                node_mask = batch["node_mask"][rows].cpu().numpy()  # (b, N)
                entities = [
                    entity_scores(*row, index.num_entities)
                    for row in zip(node_logits, entity_of_node, node_mask, strict=True)
                ]
                out.append(Scores(index, rows, np.stack(entities)))  # (b, E)
                continue
            kg_tensors = self.prior_kg(kg)
            fused = self.fused_entity_logits(batch, logits, rows, index, kg_tensors)  # (b, E)
            passages = None
            if self.has_dense_term:
                question_emb = batch["question_emb"][rows].to(self.device)  # (b, d)
                passages = self.passage_scores(fused, kg_tensors, question_emb).cpu().numpy()  # (b, P)
            # float64 as without a prior: the simple and softmax_sum rankers sum in the scores' type
            out.append(Scores(index, rows, fused.cpu().numpy().astype(np.float64), passages))
        return out


def kg_rows(kgs: list[str], keep: list[bool] | None = None) -> dict[str, list[int]]:
    """The batch rows of each KG, in first-seen order (a GLM batch may mix KGs); ``keep``: only rows marked True."""
    rows: dict[str, list[int]] = {}
    for row, kg in enumerate(kgs):
        if keep is None or keep[row]:
            rows.setdefault(kg, []).append(row)
    return rows


def glm_encoder(config: GLMConfig) -> GraphEncoder:
    """The encoder ``config`` names: its backbone, pretrained or random, with its frozen layers and checkpointing."""
    path = None if config.encoder_config is not None else resolve_model_path(config.encoder)
    backbone = config.backbone or ("t5" if path is None else AutoConfig.from_pretrained(path).model_type)
    if backbone not in BACKBONES:
        raise ValueError(
            f"model.glm.encoder={config.encoder!r} is a {backbone!r} model; the GLM reads {tuple(BACKBONES)} encoders"
        )
    encoder_class, config_class = BACKBONES[backbone]
    kwargs = {"attention": config.attention, "backend": config.backend}
    if backbone == "mpnet":
        kwargs["absolute_positions"] = config.absolute_positions
    elif config.absolute_positions != "sentence":
        raise ValueError("model.glm.absolute_positions is MPNet's: T5 has no absolute positions; leave it sentence")
    if path is None:
        known = set(config_class().to_dict()) | set(config_class.attribute_map)
        unknown = sorted(set(config.encoder_config) - known)
        if unknown:
            raise ValueError(
                f"model.glm.encoder_config has {unknown}, which are not {config_class.__name__} fields (backbone "
                f"{backbone}); set model.glm.backbone to the encoder these fields describe, or use its field names"
            )
        fields = {"vocab_size": len(load_tokenizer(config.tokenizer)), **config.encoder_config}
        encoder = encoder_class.from_config(config_class(**fields), **kwargs)
    else:
        encoder = encoder_class.from_pretrained(path, **kwargs).train()  # from_pretrained returns eval mode
    encoder.freeze_bottom(config.frozen_layers)
    if config.gradient_checkpointing:
        encoder.enable_gradient_checkpointing()
    return encoder


def entity_scores(node_logits: np.ndarray, entity_of_node: np.ndarray, node_mask: np.ndarray, num_entities: int):
    """Scatter the logits of entity nodes into a vector over the KG's entities, ``-inf`` elsewhere.

    Shapes: **node_logits**, **entity_of_node**, **node_mask** ``(N,)`` -> ``(E,)`` float64.
    """
    scores = np.full(num_entities, -np.inf)
    scores[entity_of_node[node_mask]] = node_logits[node_mask]
    return scores
