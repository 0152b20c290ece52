"""The GLM retriever network: GLM encoder -> entity-node embeddings -> query interaction -> scores.

GLM-RAG Sec. 3 ("GLM retriever"): "The resulting per-entity embeddings are element-wise multiplied with
a projected question vector and passed through a scoring head." An entity node's embedding pools the
encoder states of its tokens (mean by default; first or last token as ablations, GLM-RAG Table 15
"aggregation"); the question vector is a linear projection of the question's sentence embedding (the
same MiniLM embedding the GNN reads); the head is a 2-layer MLP giving one logit per entity node. Query
interaction can be switched off (GLM-RAG App. C, "Query Interaction", Table 15: the product is then skipped and
the question reaches the nodes only through its tokens in the FullyConnected input, if any).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from glmrag.nn.glm import GraphEncoder

AGGREGATIONS = ("mean", "first", "last")


@dataclass(frozen=True)
class GLMInputs:
    """A padded batch of Levi graphs, as the DataModule's collate builds it.

    Shapes: ``B`` graphs, ``L`` tokens, ``N`` nodes, ``d_q`` question embedding size.
    """

    input_ids: torch.Tensor
    """(B, L) int64 token ids (0 on padding)."""
    token_mask: torch.Tensor
    """(B, L) bool real tokens."""
    relative_position: torch.Tensor
    """(B, L, L) int graph-aware relative positions (:func:`glmrag.graph.levi.graph_positions`)."""
    kind: torch.Tensor
    """(B, L, L) int8 pair kinds."""
    node_of_token: torch.Tensor
    """(B, L) int64 node of each token; -1 for question, padding and linear relation tokens."""
    node_mask: torch.Tensor
    """(B, N) bool entity nodes (relation nodes and padding False)."""
    question_emb: torch.Tensor
    """(B, d_q) float sentence embedding of each question."""

    @classmethod
    def from_batch(cls, batch: dict) -> GLMInputs:
        return cls(**{name: batch[name] for name in cls.__dataclass_fields__})


def pool_nodes(hidden: torch.Tensor, node_of_token: torch.Tensor, num_nodes: int, aggregation: str) -> torch.Tensor:
    """Pool token states into node states: mean, first or last token of each node (0 for a node without tokens).

    Shapes: **hidden** ``(B, L, d)``, **node_of_token** ``(B, L)`` -> ``(B, N, d)``.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    batch, length, dim = hidden.shape
    valid = node_of_token >= 0  # (B, L)
    # One flat slot per (graph, node); invalid tokens go to a spare slot that is dropped.
    offset = num_nodes * torch.arange(batch, device=hidden.device)[:, None]  # (B, 1)
    slot = torch.where(valid, node_of_token + offset, batch * num_nodes).reshape(-1)  # (B * L,)
    if aggregation == "mean":
        total = hidden.new_zeros(batch * num_nodes + 1, dim).index_add_(0, slot, hidden.reshape(-1, dim))
        count = hidden.new_zeros(batch * num_nodes + 1).index_add_(0, slot, valid.reshape(-1).to(hidden.dtype))
        pooled = total / count.clamp(min=1)[:, None]  # (B * N + 1, d)
    else:
        position = torch.arange(length, device=hidden.device).repeat(batch)  # (B * L,) token index in its graph
        pick = position.new_full((batch * num_nodes + 1,), -1)
        reduce = "amin" if aggregation == "first" else "amax"
        pick = pick.scatter_reduce(0, slot, position, reduce=reduce, include_self=False)
        rows = torch.arange(batch * num_nodes + 1, device=hidden.device) // num_nodes
        token = rows.clamp(max=batch - 1) * length + pick.clamp(min=0)  # (B * N + 1,) flat token index
        pooled = hidden.reshape(-1, dim)[token] * (pick >= 0)[:, None]  # (B * N + 1, d)
    return pooled[:-1].reshape(batch, num_nodes, dim)  # (B, N, d)


class GLMRetriever(nn.Module):
    """Scores the entity nodes of Levi graphs for their questions.

    Args:
        encoder: a :class:`~glmrag.nn.glm.GraphEncoder` (T5 or MPNet).
        question_dim: size of the question sentence embedding (384: all-MiniLM-L6-v2).
        aggregation: node pooling, ``mean`` | ``first`` | ``last``.
        query_interaction: multiply node embeddings by the projected question embedding.
    """

    def __init__(
        self, encoder: GraphEncoder, question_dim: int = 384, aggregation: str = "mean", query_interaction: bool = True
    ) -> None:
        super().__init__()
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        d_model = encoder.d_model
        self.encoder, self.aggregation = encoder, aggregation
        self.question_proj = nn.Linear(question_dim, d_model) if query_interaction else None
        self.scorer = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, 1))

    def head_parameters(self) -> list[nn.Parameter]:
        """The parameters outside T5 (question projection, scorer, extra buckets): GLM-RAG's "head" lr."""
        head = [*self.scorer.parameters(), self.encoder.extra_bias]
        return head + (list(self.question_proj.parameters()) if self.question_proj is not None else [])

    def forward(self, inputs: GLMInputs) -> torch.Tensor:
        """One logit per node; only entity nodes (``node_mask``) are meaningful.

        Shapes: see :class:`GLMInputs` -> ``(B, N)``.
        """
        hidden = self.encoder(inputs.input_ids, inputs.token_mask, inputs.relative_position, inputs.kind)  # (B, L, d)
        nodes = pool_nodes(hidden, inputs.node_of_token, inputs.node_mask.shape[1], self.aggregation)  # (B, N, d)
        if self.question_proj is not None:
            query = self.question_proj(inputs.question_emb.to(nodes.dtype))  # (B, d)
            nodes = nodes * query[:, None, :]  # (B, N, d)
        return self.scorer(nodes).squeeze(-1)  # (B, N)
