"""The query-dependent GNN retriever of GFM-RAG, GFM-RAG* and GFM-RAG+.

GFM-RAG (Luo et al. 2025; GLM-RAG §4.2.1, Table 14) ranks every entity of a KG
for a question with an NBFNet-style GNN (Zhu et al. 2021, as adapted by ULTRA,
Galkin et al. 2024):

1. the question embedding is projected to the hidden size, ``q = W_q e_question``;
2. each seed entity starts with the query, weighted by ``1 / |passages mentioning
   it|``; every other entity starts at zero (``h0``);
3. ``num_layers`` :class:`QueryRelationalConv` layers pass DistMult messages
   ``h_u * r`` along both directions of every triple, sum them, add the initial
   state ``h0`` (the boundary condition) and update each entity;
4. a 2-layer MLP scores ``[h_L, q]`` per entity.

GFM-RAG+ (GLM-RAG App. B.1) instead starts every entity from its projected text
embedding ``x``, with the query injected at the seeds (``h0 = x + w q``) or in
every entity (``h0 = q * x + w q``, the paper's default).

Layout: the states of a batch of B questions are kept node-major, ``(E, B, H)``.
One edge list then serves the whole batch, gather and scatter run over
contiguous rows of ``B * H`` floats, and a relation vector is broadcast over
the batch instead of being copied per question. (Flattening to ``(B * E, H)``
would need an edge list B times as long with offsets ``b * E`` for the same
arithmetic.) Memory is dominated by the ``(2T, B, H)`` messages of each layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing

from glmrag.nn.graph_inputs import GraphInputs

QUERY_INJECTIONS = ("seeds", "all")


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
    """GFM-RAG+ only. ``"seeds"``: the query is added at the seeds, ``h0 = x + w q``. ``"all"``: every entity gets
    ``q * x`` and the seeds also ``w q``. GLM-RAG App. B.1 (Table 6) found ``"all"`` better and uses it."""
    dropout: float = 0.0
    """Dropout on each layer's update before the residual (GFM-RAG uses none)."""

    def __post_init__(self) -> None:
        for name in ("hidden_channels", "num_layers", "question_dim", "relation_dim", "node_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"GNNConfig.{name} must be positive, got {getattr(self, name)}")
        if self.query_injection not in QUERY_INJECTIONS:
            raise ValueError(
                f"GNNConfig.query_injection must be one of {QUERY_INJECTIONS}, got {self.query_injection!r}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GNNConfig.dropout must lie in [0, 1), got {self.dropout}")


class QueryRelationalConv(MessagePassing):
    r"""One layer of the query-dependent relational GNN (NBFNet / ULTRA, as used by GFM-RAG).

    .. math::
        \mathbf{r}^{\ell} = \mathrm{MLP}^{\ell}(\mathbf{r}), \qquad
        \mathbf{a}_v = \mathbf{h}^{0}_v + \sum_{(u, r, v)} \mathbf{h}_u \odot \mathbf{r}^{\ell}_{r}, \qquad
        \mathbf{h}'_v = \mathbf{h}_v + \mathrm{ReLU}\big(\mathrm{LayerNorm}(\mathbf{W}[\mathbf{h}_v \,\|\,
        \mathbf{a}_v] + \mathbf{b})\big)

    The DistMult message and sum aggregation follow GLM-RAG Table 14; the
    boundary term ``h0`` is NBFNet's (Zhu et al. 2021, Eq. 6); each layer
    projects the shared relation features with its own 2-layer MLP (ULTRA's
    ``project_relations``). The residual is GFM-RAG's ``short_cut``.

    Args:
        hidden_channels: size H of node states and relation features.
        dropout: dropout on the update before the residual.

    Shapes:
        - **x**, **boundary**: ``(N, *, H)``; ``*`` is any batch shape, e.g. ``(N, B, H)``
        - **edge_index**: ``(2, E)``, **edge_type**: ``(E,)``
        - **relation**: ``(num_edge_types, H)``, shared by the batch
        - **output**: ``(N, *, H)``
    """

    def __init__(self, hidden_channels: int, dropout: float = 0.0) -> None:
        super().__init__(aggr="sum", node_dim=0)
        self.hidden_channels = hidden_channels
        self.relation_proj = nn.Sequential(
            nn.Linear(hidden_channels, hidden_channels),
            nn.ReLU(),
            nn.Linear(hidden_channels, hidden_channels),
        )
        self.linear = nn.Linear(2 * hidden_channels, hidden_channels)
        self.norm = nn.LayerNorm(hidden_channels)
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for module in (self.relation_proj[0], self.relation_proj[2], self.linear, self.norm):
            module.reset_parameters()

    def forward(
        self,
        x: torch.Tensor,
        boundary: torch.Tensor,
        edge_index: torch.Tensor,
        edge_type: torch.Tensor,
        relation: torch.Tensor,
    ) -> torch.Tensor:
        relation = self.relation_proj(relation)  # (num_edge_types, H)
        aggr = self.propagate(edge_index, x=x, relation=relation, edge_type=edge_type) + boundary  # (N, *, H)
        update = F.relu(self.norm(self.linear(torch.cat([x, aggr], dim=-1))))  # (N, *, H)
        return x + self.dropout(update)

    def message(self, x_j: torch.Tensor, relation: torch.Tensor, edge_type: torch.Tensor) -> torch.Tensor:
        r = relation.index_select(0, edge_type)  # (E, H)
        r = r.view(r.shape[0], *([1] * (x_j.dim() - 2)), r.shape[1])  # (E, 1.., H): broadcast over the batch
        return x_j * r  # (E, *, H)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.hidden_channels})"


class QueryGNN(nn.Module):
    """The GFM-RAG entity retriever: a question and its seed entities in, one logit per entity out."""

    def __init__(self, config: GNNConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_channels
        self.question_proj = nn.Linear(config.question_dim, hidden)  # GFM-RAG question_mlp
        self.relation_proj = nn.Linear(config.relation_dim, hidden)  # GFM-RAG rel_mlp, shared by all layers
        self.node_proj = nn.Linear(config.node_dim, hidden) if config.use_node_features else None
        self.convs = nn.ModuleList(QueryRelationalConv(hidden, config.dropout) for _ in range(config.num_layers))
        # Entity scorer: a 2-layer MLP over [h_L, q] (GLM-RAG Table 14).
        self.readout = nn.Sequential(nn.Linear(2 * hidden, 2 * hidden), nn.ReLU(), nn.Linear(2 * hidden, 1))

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
    ) -> torch.Tensor:
        """Score every entity for a batch of questions.

        Shapes:
            - **query**: ``(B, question_dim)`` question embeddings
            - **seed_weight**: ``(B, E)``, from :func:`glmrag.nn.graph_inputs.seed_weights`
            - **edge_mask**: ``(2T,)`` bool, False drops an edge for the whole batch; None keeps all
            - **output**: ``(B, E)`` logits
        """
        return self.score(graph, self.question_proj(query), seed_weight, edge_mask)

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
        weight 1. Use ``edge_mask`` to hide the target edges.

        Shapes:
            - **head**: ``(B,)`` entity ids
            - **relation**: ``(B,)`` edge types in ``[0, 2R)`` (``r + R`` asks for heads of ``r``)
            - **edge_mask**: ``(2T,)`` bool or None
            - **output**: ``(B, E)`` logits
        """
        query = self.relation_proj(graph.relation_features.index_select(0, relation))  # (B, H)
        seed_weight = F.one_hot(head, graph.num_nodes).to(query.dtype)  # (B, E)
        return self.score(graph, query, seed_weight, edge_mask)

    def score(
        self,
        graph: GraphInputs,
        query: torch.Tensor,
        seed_weight: torch.Tensor,
        edge_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Message passing and readout from a query already in the hidden space.

        Shapes: **query** ``(B, H)``, **seed_weight** ``(B, E)`` -> ``(B, E)`` logits.
        """
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
        edge_index, edge_type = graph.edge_index, graph.edge_type
        if edge_mask is not None:
            edge_index, edge_type = edge_index[:, edge_mask], edge_type[edge_mask]

        relation = self.relation_proj(graph.relation_features)  # (2R, H)
        h0 = self.initial_state(graph, query, seed_weight)  # (E, B, H)
        x = h0
        for conv in self.convs:
            x = conv(x, h0, edge_index, edge_type, relation)  # (E, B, H)

        q = query.unsqueeze(0).expand(graph.num_nodes, -1, -1)  # (E, B, H)
        logits = self.readout(torch.cat([x, q], dim=-1)).squeeze(-1)  # (E, B)
        return logits.t().contiguous()  # (B, E)

    def initial_state(self, graph: GraphInputs, query: torch.Tensor, seed_weight: torch.Tensor) -> torch.Tensor:
        """The boundary condition h0.

        Shapes: **query** ``(B, H)``, **seed_weight** ``(B, E)`` -> ``(E, B, H)``.
        """
        w = seed_weight.t().unsqueeze(-1).to(query.dtype)  # (E, B, 1)
        seeded = w * query.unsqueeze(0)  # (E, B, H): GFM-RAG, query at the seeds, zero elsewhere
        if self.node_proj is None:
            return seeded
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
        x = self.node_proj(graph.node_features).unsqueeze(1)  # (E, 1, H)
        if self.config.query_injection == "seeds":
            return x + seeded  # (E, B, H)
        return x * query.unsqueeze(0) + seeded  # (E, B, H)
