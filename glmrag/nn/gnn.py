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

GFM-RAG+ (GLM-RAG App. B.1) instead starts every entity from its text embedding
``x`` (the same sentence encoder as the question's ``e``): "all entities get query",
the paper's baseline, initialises every node as ``e ⊙ x``; "only seed entities get
query" multiplies only the seeds by the query, ``e ⊙ x`` at the seeds and ``x``
elsewhere. The product lives in the embedding space and is mapped to the hidden
size by the question's own projection ``W_q``, so GFM-RAG+ has GFM-RAG's
8,144,897 parameters, as Table 14 lists one count for GFM-RAG (*, +).

Layout: the states of a batch of B questions are kept node-major, ``(E, B, H)``.
One edge list then serves the whole batch, gather and scatter run over
contiguous rows of ``B * H`` floats, and a relation vector is broadcast over
the batch instead of being copied per question. (Flattening to ``(B * E, H)``
would need an edge list B times as long with offsets ``b * E`` for the same
arithmetic.) Memory is dominated by the ``(2T, B, H)`` messages of each layer.

Budgeted subgraphs (GLM-RAG §5.5, Table 3: GFM-RAG* restricted to the GLM's
600 / 500 / 400 / 300 triplets of each question's 2-hop subgraph): with a
:class:`SubgraphBatch` the questions no longer share a graph, so the batch is
laid out as PyG batches graphs, one disjoint union of per-question copies of
each subgraph, ``(N, H)`` with ``N = sum_b N_b`` local nodes. A per-(question,
edge) mask on the ``(2T, B, H)`` messages would also be exact, but would keep
the whole-KG cost (every edge, every entity, every question) to compute
messages that are then zeroed; the union costs ``O((N + 2S) H)`` per layer and
only the subgraph's entities are ever updated, which is what a question
restricted to its subgraph can score anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing

from glmrag.nn.graph_inputs import GraphInputs

QUERY_INJECTIONS = ("all", "seeds", "hidden_all", "hidden_seeds")
"""GFM-RAG+ initial states. ``all`` and ``seeds`` are GLM-RAG App. B.1's two variants; ``hidden_all`` and
``hidden_seeds`` are glmrag's earlier variants, kept by name (see :attr:`GNNConfig.query_injection`)."""
HIDDEN_INJECTIONS = ("hidden_all", "hidden_seeds")


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
        paper_injection = self.use_node_features and self.query_injection not in HIDDEN_INJECTIONS
        if paper_injection and self.node_dim != self.question_dim:
            raise ValueError(
                f"GNNConfig.query_injection={self.query_injection!r} multiplies question and entity embeddings "
                f"(GLM-RAG App. B.1), so node_dim ({self.node_dim}) must equal question_dim ({self.question_dim}): "
                "embed both with the same sentence encoder"
            )


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


@dataclass
class SubgraphBatch:
    """The budgeted subgraphs of B questions as one disjoint union (see the module docstring).

    Question ``b`` owns the local nodes ``node_question == b``, one per entity of its subgraph, and the
    edges between them: each of its triples ``h -> t`` and the inverse ``t -> h``, as
    :class:`~glmrag.nn.graph_inputs.GraphInputs` adds them. No edge joins two questions, so message
    passing of one question reads only its own subgraph. Build it with :meth:`from_triples`.
    """

    node_entity: torch.Tensor
    """(N,) long: the KG entity id of each local node."""
    node_question: torch.Tensor
    """(N,) long: the question (batch row) each local node belongs to."""
    edge_index: torch.Tensor
    """(2, 2S) long, local nodes: the S triples of all questions ``h -> t``, then their inverses ``t -> h``."""
    relation_ids: torch.Tensor
    """(K,) long: the distinct edge types in ``[0, 2R)`` the edges use (only these relations are projected)."""
    edge_relation: torch.Tensor
    """(2S,) long: each edge's type as a position in :attr:`relation_ids`."""
    num_questions: int
    """B."""

    @classmethod
    def from_triples(
        cls, triples: Sequence[np.ndarray], entities: Sequence[np.ndarray], num_relations: int
    ) -> SubgraphBatch:
        """One question per item: ``triples[b]`` ``(S_b, 3)`` (head, relation, tail) rows of the KG and
        ``entities[b]`` ``(N_b,)`` the distinct entities it may score (every triple endpoint among them).

        ``num_relations`` is R: the inverse of relation ``r`` is edge type ``r + R``.

        Shapes: ``B`` items of ``(S_b, 3)`` and ``(N_b,)`` -> ``N = sum N_b`` nodes, ``2S = 2 sum S_b`` edges.
        """
        if len(triples) != len(entities):
            raise ValueError(f"got triples of {len(triples)} questions but entities of {len(entities)}")
        nodes, heads, tails, rels, offset = [], [], [], [], 0
        for b, (rows, ents) in enumerate(zip(triples, entities, strict=True)):
            rows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)  # (S_b, 3)
            ents = np.asarray(ents, dtype=np.int64)  # (N_b,)
            order = np.argsort(ents, kind="stable")
            ends = rows[:, [0, 2]]  # (S_b, 2)
            where = np.searchsorted(ents[order], ends).clip(max=max(len(ents) - 1, 0))  # (S_b, 2)
            missing = rows.size and (not ents.size or not np.all(ents[order][where] == ends))
            if len(np.unique(ents)) != len(ents) or missing:
                raise ValueError(
                    f"subgraph of batch row {b}: entities must be distinct and hold every triple's head and "
                    "tail; pass Subgraph.entities of glmrag.graph.subgraph.select_subgraph"
                )
            local = order[where] + offset  # (S_b, 2)
            nodes.append(ents)
            heads.append(local[:, 0])
            tails.append(local[:, 1])
            rels.append(rows[:, 1])
            offset += len(ents)
        node_question = np.repeat(np.arange(len(nodes)), [len(n) for n in nodes])  # (N,)
        head, tail, rel = (np.concatenate([np.empty(0, np.int64), *a]) for a in (heads, tails, rels))  # (S,)
        edge_type = np.concatenate([rel, rel + num_relations])  # (2S,)
        relation_ids, edge_relation = np.unique(edge_type, return_inverse=True)  # (K,), (2S,)
        return cls(
            node_entity=torch.from_numpy(np.concatenate([np.empty(0, np.int64), *nodes])),
            node_question=torch.from_numpy(node_question.astype(np.int64)),
            edge_index=torch.from_numpy(np.stack([np.concatenate([head, tail]), np.concatenate([tail, head])])),
            relation_ids=torch.from_numpy(relation_ids.astype(np.int64)),
            edge_relation=torch.from_numpy(edge_relation.reshape(-1).astype(np.int64)),
            num_questions=len(nodes),
        )

    @property
    def num_nodes(self) -> int:
        """N, the local nodes of all questions."""
        return self.node_entity.shape[0]

    def entity_mask(self, num_entities: int) -> torch.Tensor:
        """Which entities each question's subgraph scores. Shapes: -> ``(B, E)`` bool."""
        mask = torch.zeros(self.num_questions, num_entities, dtype=torch.bool, device=self.node_entity.device)
        scored = torch.ones_like(self.node_entity, dtype=torch.bool)  # (N,)
        return mask.index_put_((self.node_question, self.node_entity), scored)  # (B, E)

    def to(self, device: torch.device | str) -> SubgraphBatch:
        """A copy with every tensor on ``device``."""
        moved = {k: v.to(device) for k, v in vars(self).items() if torch.is_tensor(v)}
        return SubgraphBatch(**moved, num_questions=self.num_questions)


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

        relation = self.relation_proj(graph.relation_features)  # (2R, H)
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
