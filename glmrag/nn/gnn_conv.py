"""The message-passing layer of GFM-RAG's query-dependent GNN (NBFNet / ULTRA): DistMult messages, sum."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing


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
