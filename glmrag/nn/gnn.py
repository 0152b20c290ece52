"""The query-dependent GNN retriever of GFM-RAG, GFM-RAG* and GFM-RAG+.

GFM-RAG (Luo et al. 2025; GLM-RAG §4.2.1, Table 14) ranks every entity of a KG for a question with an
NBFNet-style GNN (as ULTRA adapts it): the projected question ``q = W_q e`` starts at the seed entities,
weighted by ``1 / |passages mentioning it|`` (zero elsewhere); ``num_layers``
:class:`~glmrag.nn.gnn_conv.QueryRelationalConv` layers pass DistMult messages along both directions of
every triple; a 2-layer MLP scores ``[h_L, q]``. GFM-RAG+ (App. B.1) starts entities from their text
embeddings times the question (``query_injection``), mapped by ``W_q``, so it keeps Table 14's parameter
count. States are node-major, ``(E, B, H)``: one edge list serves the batch, and the fused aggregation
(:mod:`glmrag.nn.rspmm`) never stores a layer's messages. Budgeted subgraphs (GLM-RAG Table 3):
:meth:`QueryGNN.score_subgraphs` with a :class:`~glmrag.nn.subgraph_batch.SubgraphBatch`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from glmrag.nn.fixed_cache import NoGradCache
from glmrag.nn.gnn_conv import AGGREGATIONS, QueryRelationalConv
from glmrag.nn.graph_inputs import GraphInputs
from glmrag.nn.subgraph_batch import SubgraphBatch

QUERY_INJECTIONS = ("all", "seeds", "hidden_all", "hidden_seeds")
"""GFM-RAG+ initial states. ``all`` and ``seeds`` are GLM-RAG App. B.1's two variants; ``hidden_all`` and
``hidden_seeds`` are glmrag's earlier variants, kept by name (see :attr:`GNNConfig.query_injection`)."""
HIDDEN_INJECTIONS = ("hidden_all", "hidden_seeds")


SIZE_BOUNDS = {"num_layers": 64, "hidden_channels": 65536}
"""Sanity bounds on the GNN's size: 16 times the papers' largest (6 layers, GLM-RAG Table 14; 4096 channels, the
capacity-matched pairs of Table 18). ``num_layers=1000000`` built for 110 s at 2.3 GB and more without a word."""


@dataclass
class GNNConfig:
    """Sizes and variant of a :class:`QueryGNN`."""

    hidden_channels: int = 512
    """Hidden size H: 512 in GFM-RAG (GLM-RAG Table 14); 1024, 2048, 4096 for the capacity-matched pairs of Table 18."""
    num_layers: int = 6
    """Message-passing layers L (GLM-RAG Table 14: 6)."""
    question_dim: int = 384
    """Size of the question sentence embedding (384 for MiniLM; GFM-RAG used 768-d all-mpnet-base-v2, Table 14)."""
    relation_dim: int = 384
    """Size of the relation-name sentence embeddings in ``GraphInputs.relation_features``."""
    node_dim: int = 384
    """Size of the entity text embeddings in ``GraphInputs.node_features`` (GFM-RAG+ only)."""
    use_node_features: bool = False
    """GFM-RAG+ (GLM-RAG §5.1, App. B.1): entities start from their text embeddings instead of zeros."""
    query_injection: str = "all"
    """GFM-RAG+ only; ``e`` the question's and ``x_v`` entity v's sentence embedding, ``W_q`` the question
    projection, ``w_v`` v's seed weight, ``x'_v = W_x x_v`` a separate entity projection. GLM-RAG App. B.1:
    ``"all"``: ``h0_v = W_q (e ⊙ x_v)`` for every entity (Table 6's better variant, the paper's GFM-RAG+);
    ``"seeds"``: ``h0_v = W_q (e ⊙ x_v)`` at the seeds (``w_v > 0``) and ``W_q x_v`` elsewhere. Not in the
    paper (glmrag's earlier variants, in the hidden space and with GFM-RAG's seeded query added):
    ``"hidden_all"``: ``(W_q e) ⊙ x'_v + w_v W_q e``; ``"hidden_seeds"``: ``x'_v + w_v W_q e``."""
    dropout: float = 0.0
    """Dropout on each layer's update before the residual (GFM-RAG uses none)."""
    aggregation: str = "fused"
    """How each layer sums its DistMult messages (same results, different memory): ``"fused"`` walks the
    edges in chunks without storing the ``(2T, B, H)`` messages (:mod:`glmrag.nn.rspmm`; GFM-RAG's code uses
    ULTRA's C++ ``rspmm`` for this) and keeps less of the layer update for backward; ``"materialized"`` is the
    layer as first written, with PyG's ``message`` (the reference)."""

    @property
    def paper_injection(self) -> bool:
        """GFM-RAG+ with App. B.1's injection: the question's sentence embedding times each entity's, through
        ``question_proj`` (the ``hidden_*`` variants project the entities with ``node_proj`` instead)."""
        return self.use_node_features and self.query_injection not in HIDDEN_INJECTIONS

    def __post_init__(self) -> None:
        for name in ("hidden_channels", "num_layers", "question_dim", "relation_dim", "node_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"model.gnn.{name}={value!r}: must be an integer >= 1")
        for name, bound in SIZE_BOUNDS.items():
            if getattr(self, name) > bound:
                raise ValueError(
                    f"model.gnn.{name}={getattr(self, name)}: above the sanity bound {bound} (16 times the papers' "
                    "largest); a model that size takes minutes and gigabytes just to build. Raise SIZE_BOUNDS in "
                    "glmrag/nn/gnn.py if you mean it"
                )
        if self.query_injection not in QUERY_INJECTIONS:
            raise ValueError(
                f"GNNConfig.query_injection must be one of {QUERY_INJECTIONS}, got {self.query_injection!r}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GNNConfig.dropout must lie in [0, 1), got {self.dropout}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"GNNConfig.aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.paper_injection and self.node_dim != self.question_dim:
            raise ValueError(
                f"GNNConfig.query_injection={self.query_injection!r} multiplies question and entity embeddings "
                f"(GLM-RAG App. B.1), so node_dim ({self.node_dim}) must equal question_dim ({self.question_dim}): "
                "embed both with the same sentence encoder"
            )


class QueryGNN(nn.Module):
    """The GFM-RAG entity retriever: a question and its seed entities in, one logit per entity out."""

    def __init__(self, config: GNNConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_channels
        self.question_proj = nn.Linear(config.question_dim, hidden)  # GFM-RAG question_mlp
        self.relation_proj = nn.Linear(config.relation_dim, hidden)  # GFM-RAG rel_mlp, shared by all layers
        separate = config.use_node_features and config.query_injection in HIDDEN_INJECTIONS
        self.node_proj = nn.Linear(config.node_dim, hidden) if separate else None  # hidden_* variants only
        self.convs = nn.ModuleList(
            QueryRelationalConv(hidden, config.dropout, config.aggregation) for _ in range(config.num_layers)
        )
        self.relation_cache = NoGradCache()  # the shared projection, once per graph at evaluation
        # Entity scorer: a 2-layer MLP over [h_L, q] (GLM-RAG Table 14).
        self.readout = nn.Sequential(nn.Linear(2 * hidden, 2 * hidden), nn.ReLU(), nn.Linear(2 * hidden, 1))

    def kgc_unused(self) -> list[nn.Module]:
        """The modules :meth:`kgc_forward` never reaches: the question projection, unless GFM-RAG+'s paper
        injection (App. B.1) feeds it the relation embedding. KG-completion freezes them, since DDP needs a
        gradient for every trainable parameter at every step."""
        return [] if self.config.paper_injection else [self.question_proj]

    def reset_parameters(self) -> None:
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def forward(
        self,
        graph: GraphInputs,
        query: torch.Tensor,
        seed_weight: torch.Tensor,
        edge_mask: torch.Tensor | None = None,
        subgraphs: SubgraphBatch | None = None,
    ) -> torch.Tensor:
        """Score every entity for a batch of questions, or each question's subgraph entities only.

        With ``subgraphs`` (GLM-RAG §5.5, Table 3), question ``b`` passes messages along its own
        subgraph's edges only and scores only its subgraph's entities: see :meth:`score_subgraphs`.

        Shapes:
            - **query**: ``(B, question_dim)`` question embeddings
            - **seed_weight**: ``(B, E)``, from :func:`glmrag.nn.graph_inputs.seed_weights`
            - **edge_mask**: ``(2T,)`` bool, False drops an edge for the whole batch; None keeps all
            - **subgraphs**: a :class:`SubgraphBatch` of B questions, or None for the whole KG
            - **output**: ``(B, E)`` logits; ``-inf`` outside a question's subgraph
        """
        if subgraphs is None:
            return self.score(graph, self.question_proj(query), seed_weight, edge_mask, question=query)
        if edge_mask is not None:
            raise ValueError("edge_mask and subgraphs cannot be combined: drop the edges from the subgraphs instead")
        return self.score_subgraphs(graph, self.question_proj(query), seed_weight, subgraphs, question=query)

    def kgc_forward(
        self,
        graph: GraphInputs,
        head: torch.Tensor,
        relation: torch.Tensor,
        edge_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Score every entity as the tail of ``(head, relation, ?)``, for KG-completion pretraining.

        As in GFM-RAG's pretraining, the query is the relation's own projected
        feature (``rel_mlp(rel_emb)[r]``) and the head is the only seed, with
        weight 1. Use ``edge_mask`` to hide the target edges. With entity features (GFM-RAG+, which the
        paper does not pretrain) the relation's sentence embedding stands in for the question's.

        Shapes:
            - **head**: ``(B,)`` entity ids
            - **relation**: ``(B,)`` edge types in ``[0, 2R)`` (``r + R`` asks for heads of ``r``)
            - **edge_mask**: ``(2T,)`` bool or None
            - **output**: ``(B, E)`` logits
        """
        embedding = graph.relation_features.index_select(0, relation)  # (B, relation_dim)
        query = self.relation_proj(embedding)  # (B, H)
        seed_weight = F.one_hot(head, graph.num_nodes).to(query.dtype)  # (B, E)
        return self.score(graph, query, seed_weight, edge_mask, question=embedding)

    def score(
        self,
        graph: GraphInputs,
        query: torch.Tensor,
        seed_weight: torch.Tensor,
        edge_mask: torch.Tensor | None = None,
        question: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Message passing and readout from a query already in the hidden space.

        ``question`` is the query's sentence embedding before projection, which GFM-RAG+'s App. B.1 initial
        states multiply with the entity embeddings (unused without entity features).

        Shapes: **query** ``(B, H)``, **seed_weight** ``(B, E)``, **question** ``(B, question_dim)``
        -> ``(B, E)`` logits.
        """
        self._check(graph, query, seed_weight)
        edge_index, edge_type = graph.edge_index, graph.edge_type
        if edge_mask is not None:
            edge_index, edge_type = edge_index[:, edge_mask], edge_type[edge_mask]

        relation = self.relation_cache(self.relation_proj, graph.relation_features)  # (2R, H)
        h0 = self.initial_state(graph, query, seed_weight, question)  # (E, B, H)
        x = h0
        for conv in self.convs:
            x = conv(x, h0, edge_index, edge_type, relation)  # (E, B, H)

        logits = self.read_out(x, query)  # (E, B)
        return logits.t().contiguous()  # (B, E)

    def score_subgraphs(
        self,
        graph: GraphInputs,
        query: torch.Tensor,
        seed_weight: torch.Tensor,
        subgraphs: SubgraphBatch,
        question: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`score` with each question restricted to its own subgraph (GLM-RAG §5.5, Table 3).

        The layers run on the disjoint union of the questions' subgraphs: local node ``n`` of question
        ``b`` starts from the boundary condition of entity ``node_entity[n]`` for question ``b`` and
        receives messages along ``b``'s subgraph edges only. A local node's state is therefore the state
        its entity has when the whole-KG GNN runs on a KG of only ``b``'s subgraph triples; entities
        outside the subgraph get the logit ``-inf`` (ranked after every subgraph entity, no gradient).

        Shapes:
            - **query**: ``(B, H)``, **seed_weight**: ``(B, E)``, **question**: ``(B, question_dim)`` (as :meth:`score`)
            - local states ``(N, H)``, messages ``(2S, H)``: N subgraph entities and S triples in all
            - **output**: ``(B, E)`` logits, ``-inf`` outside each question's subgraph
        """
        self._check(graph, query, seed_weight)
        if subgraphs.num_questions != query.shape[0]:
            raise ValueError(f"subgraphs hold {subgraphs.num_questions} questions but the batch has {query.shape[0]}")
        rows, ents = subgraphs.node_question, subgraphs.node_entity  # (N,) each
        # Projecting only the relations the subgraphs use gives the same rows as projecting all 2R.
        relation = self.relation_proj(graph.relation_features.index_select(0, subgraphs.relation_ids))  # (K, H)
        q = query.index_select(0, rows)  # (N, H)
        w = seed_weight[rows, ents].unsqueeze(-1).to(query.dtype)  # (N, 1)
        raw = None if question is None else question.index_select(0, rows)  # (N, question_dim)
        h0 = self._boundary(w, q, raw, graph, ents)  # (N, H)
        x = h0
        for conv in self.convs:
            x = conv(x, h0, subgraphs.edge_index, subgraphs.edge_relation, relation)  # (N, H)
        local = self.read_out(x, query, rows)  # (N,)
        logits = local.new_full((query.shape[0], graph.num_nodes), float("-inf"))  # (B, E)
        return logits.index_put((rows, ents), local)

    def read_out(self, x: torch.Tensor, query: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The entity scorer ``MLP([x, q])`` (GLM-RAG Table 14), its first layer applied as ``W_h x + (W_q q + b)``.

        ``W = [W_h | W_q]`` is the stored ``readout[0].weight`` (so checkpoints keep their layout), and the
        question half is computed once per question instead of once per entity: no ``(E, B, 2H)`` concatenation
        and a quarter fewer readout FLOPs, with the same sums.

        Shapes: **x** ``(E, B, H)``, **query** ``(B, H)`` -> ``(E, B)``; or, for subgraph batches,
        **x** ``(N, H)``, **query** ``(B, H)``, **rows** ``(N,)`` the question of each node -> ``(N,)``.
        """
        first, activation, last = self.readout
        hidden = x.shape[-1]
        question_part = F.linear(query, first.weight[:, hidden:], first.bias)  # (B, 2H)
        if rows is not None:
            question_part = question_part.index_select(0, rows)  # (N, 2H)
        entity_part = F.linear(x, first.weight[:, :hidden])  # (E, B, 2H) or (N, 2H)
        return last(activation(entity_part + question_part)).squeeze(-1)  # (E, B) or (N,)

    def _check(self, graph: GraphInputs, query: torch.Tensor, seed_weight: torch.Tensor) -> None:
        if graph.relation_features.shape[1] != self.config.relation_dim:
            raise ValueError(
                f"graph.relation_features has {graph.relation_features.shape[1]} columns but "
                f"GNNConfig.relation_dim is {self.config.relation_dim}; set relation_dim to the embedder's size"
            )
        if seed_weight.shape != (query.shape[0], graph.num_nodes):
            raise ValueError(
                f"seed_weight has shape {tuple(seed_weight.shape)}, "
                f"expected (B, E) = {(query.shape[0], graph.num_nodes)}"
            )

    def initial_state(
        self, graph: GraphInputs, query: torch.Tensor, seed_weight: torch.Tensor, question: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The boundary condition h0 (GFM-RAG: ``w q`` at the seeds; GFM-RAG+: see :attr:`GNNConfig.query_injection`).

        Shapes: **query** ``(B, H)``, **seed_weight** ``(B, E)``, **question** ``(B, question_dim)`` or None
        -> ``(E, B, H)``.
        """
        w = seed_weight.t().unsqueeze(-1).to(query.dtype)  # (E, B, 1)
        raw = None if question is None else question.unsqueeze(0)  # (1, B, question_dim)
        return self._boundary(w, query.unsqueeze(0), raw, graph)  # (E, B, H)

    def _boundary(
        self,
        w: torch.Tensor,
        query: torch.Tensor,
        question: torch.Tensor | None,
        graph: GraphInputs,
        entities: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """h0 from the seed weights ``w``, the projected query and, for GFM-RAG+, the entity embeddings.

        Shapes: whole KG ``(E, B, 1)``, ``(1, B, H)``, ``(1, B, D)`` -> ``(E, B, H)``; subgraphs
        (``entities`` ``(N,)``) ``(N, 1)``, ``(N, H)``, ``(N, D)`` -> ``(N, H)``.
        """
        seeded = w * query  # (E, B, H): GFM-RAG, the query at the seeds, zero elsewhere
        features = self._node_features(graph, entities)  # (E | N, D) or None
        if features is None:
            return seeded
        if features.dim() < query.dim():
            features = features.unsqueeze(1)  # (E, 1, D): broadcast over the batch
        mode = self.config.query_injection
        if mode in HIDDEN_INJECTIONS:
            x = self.node_proj(features)  # (E, 1, H) or (N, H)
            return x + seeded if mode == "hidden_seeds" else x * query + seeded
        if question is None:
            raise ValueError(
                f"query_injection={mode!r} (GLM-RAG App. B.1) multiplies the question's sentence embedding with "
                "the entity embeddings: pass question= (QueryGNN.forward does)"
            )
        mixed = question * features  # (E, B, D) or (N, D): e ⊙ x_v
        if mode == "seeds":
            mixed = torch.where(w > 0, mixed, features)  # only the seeds get the query; the rest keep x_v
        return self.question_proj(mixed)  # (E, B, H) or (N, H)

    def _node_features(self, graph: GraphInputs, entities: torch.Tensor | None = None) -> torch.Tensor | None:
        """GFM-RAG+: the text embeddings of ``entities`` (all when None); None for GFM-RAG.

        Shapes: **entities** ``(N,)`` -> ``(N, node_dim)``; None -> ``(E, node_dim)``.
        """
        if not self.config.use_node_features:
            return None
        if graph.node_features is None:
            raise ValueError(
                "GNNConfig.use_node_features is set (GFM-RAG+) but graph.node_features is None; build the index "
                "with entity embeddings and call graph_inputs(index, node_features=True)"
            )
        if graph.node_features.shape[1] != self.config.node_dim:
            raise ValueError(
                f"graph.node_features has {graph.node_features.shape[1]} columns but GNNConfig.node_dim is "
                f"{self.config.node_dim}; set node_dim to the entity embedder's size"
            )
        return graph.node_features if entities is None else graph.node_features.index_select(0, entities)
