"""The message-passing layer of GFM-RAG's query-dependent GNN (NBFNet / ULTRA): DistMult messages, sum."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import MessagePassing

from glmrag.nn.fixed_cache import NoGradCache
from glmrag.nn.rspmm import rspmm

AGGREGATIONS = ("fused", "materialized")
"""How a layer sums its messages: ``fused`` (:func:`glmrag.nn.rspmm.rspmm`, ULTRA's rspmm in PyTorch, no
``(E, *, H)`` tensor, and :meth:`QueryRelationalConv.lean_update`) or ``materialized`` (PyG ``message`` + sum,
the reference)."""


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
    ``project_relations``), once per call with autograd, and without autograd once for as long as the
    features and weights stay the same (:class:`~glmrag.nn.fixed_cache.NoGradCache`: at evaluation, once
    per graph). The residual is GFM-RAG's ``short_cut``.

    ``aggregation="fused"`` (the default) sums with :func:`~glmrag.nn.rspmm.rspmm`, as GFM-RAG's ULTRA code
    runs its C++ ``rspmm``, and updates with :meth:`lean_update`: autograd keeps O(N * B * H) per layer.
    ``"materialized"`` is the layer as first written (PyG ``message`` + sum, then ``W [h || a]``), the
    reference: it keeps the ``(E, B, H)`` messages. Both give the same outputs and gradients (to rounding).

    Args:
        hidden_channels: size H of node states and relation features.
        dropout: dropout on the update before the residual.
        aggregation: one of :data:`AGGREGATIONS`.

    Shapes:
        - **x**, **boundary**: ``(N, *, H)``; ``*`` is any batch shape, e.g. ``(N, B, H)``
        - **edge_index**: ``(2, E)``, **edge_type**: ``(E,)``
        - **relation**: ``(num_edge_types, H)``, shared by the batch
        - **output**: ``(N, *, H)``
    """

    def __init__(self, hidden_channels: int, dropout: float = 0.0, aggregation: str = "fused") -> None:
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        super().__init__(aggr="sum", node_dim=0)
        self.hidden_channels = hidden_channels
        self.aggregation = aggregation
        self.relation_proj = nn.Sequential(
            nn.Linear(hidden_channels, hidden_channels),
            nn.ReLU(),
            nn.Linear(hidden_channels, hidden_channels),
        )
        self.linear = nn.Linear(2 * hidden_channels, hidden_channels)
        self.norm = nn.LayerNorm(hidden_channels)
        self.dropout = nn.Dropout(dropout)
        self.relation_cache = NoGradCache()
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
        relation = self.relation_cache(self.relation_proj, relation)  # (num_edge_types, H)
        if self.aggregation == "materialized":  # the reference, as first written
            aggr = self.propagate(edge_index, x=x, relation=relation, edge_type=edge_type) + boundary  # (N, *, H)
            update = F.relu(self.norm(self.linear(torch.cat([x, aggr], dim=-1))))  # (N, *, H)
            return x + self.dropout(update)
        # QueryGNN's h0 is batch-major in memory (it comes from seed_weight.t()): made node-major once here, the
        # sum, the linear maps and the residual use x without copies (at B > 1 they copied it in every layer).
        x = x.contiguous()  # (N, *, H)
        aggr = self.propagate(edge_index, x=x, relation=relation, edge_type=edge_type) + boundary  # (N, *, H)
        return x + self.dropout(self.lean_update(x, aggr))

    def lean_update(self, x: torch.Tensor, aggr: torch.Tensor) -> torch.Tensor:
        """``ReLU(LayerNorm(W [x || aggr] + b))``, keeping for backward ``aggr`` and the pre-norm sum (and ``x``,
        which the fused sum keeps anyway) instead of ``[x || aggr]``, the LayerNorm input and the ReLU output.

        ``W [x || aggr] = W_x x + W_a aggr`` with ``W = [W_x | W_a]`` the stored ``linear.weight`` (the same
        sums), and LayerNorm + ReLU run again in backward from their input: 2 of 4 ``(N, *, H)`` tensors fewer
        per layer, 190 MiB on the 2Wiki test KG at hidden 512, batch 1 (``benchmarks/scaling.md``).

        Shapes: **x**, **aggr** ``(N, *, H)`` -> ``(N, *, H)``.
        """
        hidden = x.shape[-1]
        weight = self.linear.weight
        pre = F.linear(x, weight[:, :hidden]) + F.linear(aggr, weight[:, hidden:], self.linear.bias)  # (N, *, H)
        if torch.is_grad_enabled() and pre.requires_grad:
            return checkpoint(self._norm_relu, pre, use_reentrant=False)
        return self._norm_relu(pre)

    def _norm_relu(self, pre: torch.Tensor) -> torch.Tensor:
        return F.relu(self.norm(pre))

    def propagate(self, edge_index: torch.Tensor, size: tuple[int, int] | None = None, **kwargs) -> torch.Tensor:
        """PyG's ``propagate`` (``materialized``), or :meth:`message_and_aggregate` (``fused``).

        Defining ``propagate`` also keeps ``MessagePassing.__init__`` from rendering its jinja template into a
        ``glmrag.nn.gnn_conv_*_propagate_*.py`` file in ``$TMPDIR`` that no one deletes (it writes one per
        process, PyG 2.5-2.8, and falls back to this method for classes that define their own).
        """
        if self.aggregation == "materialized":
            return super().propagate(edge_index, size=size, **kwargs)
        num_nodes = kwargs["x"].shape[0]
        if size is not None and tuple(size) != (num_nodes, num_nodes):
            raise ValueError(f"the fused aggregation passes messages within one node set, got size={size}")
        return self.message_and_aggregate(edge_index, **kwargs)

    def message_and_aggregate(
        self, edge_index: torch.Tensor, x: torch.Tensor, relation: torch.Tensor, edge_type: torch.Tensor
    ) -> torch.Tensor:
        """The sum of :meth:`message` over each node's in-edges, without the ``(E, *, H)`` messages.

        Shapes: **x** ``(N, *, H)``, **edge_index** ``(2, E)``, **relation** ``(R, H)``, **edge_type**
        ``(E,)`` -> ``(N, *, H)``.
        """
        return rspmm(x, relation, edge_index, edge_type)

    def message(self, x_j: torch.Tensor, relation: torch.Tensor, edge_type: torch.Tensor) -> torch.Tensor:
        r = relation.index_select(0, edge_type)  # (E, H)
        r = r.view(r.shape[0], *([1] * (x_j.dim() - 2)), r.shape[1])  # (E, 1.., H): broadcast over the batch
        return x_j * r  # (E, *, H)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.hidden_channels}, aggregation={self.aggregation!r})"
