"""The budgeted subgraphs of a batch of questions as one disjoint union, for :class:`~glmrag.nn.gnn.QueryGNN`.

With budgeted subgraphs (GLM-RAG §5.5, Table 3: GFM-RAG* restricted to the GLM's 600-300 triplets) the
questions no longer share a graph, so the batch is laid out as PyG batches graphs: one disjoint union of
per-question copies, ``(N, H)`` with ``N = sum_b N_b`` local nodes. This costs ``O((N + 2S) H)`` per
layer and updates only the subgraphs' entities; a per-(question, edge) mask on the ``(2T, B, H)``
messages would also be exact but keep the whole-KG cost, computing messages only to zero them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch, Data


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
        graphs = []
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
            local = order[where]  # (S_b, 2) positions in ents
            graphs.append(
                Data(
                    edge_index=torch.from_numpy(np.ascontiguousarray(local.T)),  # (2, S_b) h -> t
                    edge_rel=torch.from_numpy(rows[:, 1].copy()),  # (S_b,)
                    node_entity=torch.from_numpy(ents),  # (N_b,)
                    num_nodes=len(ents),
                )
            )
        if not graphs:  # Batch needs a graph; no question is the empty union
            empty = torch.zeros(0, dtype=torch.long)
            return cls(empty, empty, empty.reshape(2, 0), empty, empty, num_questions=0)
        union = Batch.from_data_list(graphs)  # question b's node ids offset by the nodes of questions before it
        head, tail = union.edge_index  # (S,) each
        edge_type = torch.cat([union.edge_rel, union.edge_rel + num_relations])  # (2S,)
        relation_ids, edge_relation = torch.unique(edge_type, return_inverse=True)  # (K,), (2S,)
        return cls(
            node_entity=union.node_entity,
            node_question=union.batch,
            edge_index=torch.stack([torch.cat([head, tail]), torch.cat([tail, head])]),  # (2, 2S)
            relation_ids=relation_ids,
            edge_relation=edge_relation,
            num_questions=len(graphs),
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
