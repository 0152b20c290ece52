"""The tensors a GNN retriever reads from one KG index, built once per KG.

A :class:`GraphInputs` is shared by every batch drawn from its KG: the edge list
with both directions of every triple, the sentence embeddings of the relation
names (GFM-RAG, Luo et al. 2025: relations are initialised with their sentence
embeddings, GLM-RAG §4.2.1), optional entity text embeddings (GFM-RAG+, GLM-RAG
§5.1 and App. B.1) and the number of passages mentioning each entity (for the
seed weights of :func:`seed_weights`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from glmrag.index.kg import KGIndex

INVERSE_TEXT_PREFIX = "inverse "
"""How an inverse relation is named for the sentence encoder (``KGIndex.relation_name`` writes ``inverse_<r>``)."""


class TextEncoder(Protocol):
    """Anything with ``encode(texts) -> (N, d)`` float32, like :class:`glmrag.index.embed.Embedder`."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass
class GraphInputs:
    """Tensors of one KG, built once per KG and shared by every batch drawn from it."""

    edge_index: torch.Tensor
    """(2, 2T) long: every triple ``h -> t`` (columns ``0..T-1``) plus its inverse ``t -> h`` (columns ``T..2T-1``)."""
    edge_type: torch.Tensor
    """(2T,) long in ``[0, 2R)``: ``r`` for ``h -> t``, ``r + R`` for ``t -> h`` (the relation ``inverse_<r>``)."""
    relation_features: torch.Tensor
    """(2R, relation_dim) float: sentence embeddings of the relation names, inverse names included."""
    node_features: torch.Tensor | None
    """(E, node_dim) entity text embeddings (GFM-RAG+), or None."""
    entity_passage_count: torch.Tensor
    """(E,) float: passages mentioning each entity (>= 1 for linked entities)."""
    num_nodes: int
    """Number of entities E."""

    def __post_init__(self) -> None:
        num_edges = self.edge_index.shape[1]
        if self.edge_index.shape[0] != 2 or self.edge_type.shape != (num_edges,):
            raise ValueError(
                f"edge_index must be (2, 2T) and edge_type (2T,), got {tuple(self.edge_index.shape)} "
                f"and {tuple(self.edge_type.shape)}"
            )
        if self.relation_features.shape[0] % 2:
            raise ValueError(
                f"relation_features has {self.relation_features.shape[0]} rows; expected 2R "
                "(the R relations followed by their R inverses)"
            )
        on_cpu = self.edge_type.device.type == "cpu"  # checking values elsewhere would sync the device
        if num_edges and on_cpu and int(self.edge_type.max()) >= self.relation_features.shape[0]:
            raise ValueError("edge_type refers to a relation without a row in relation_features")
        if self.node_features is not None and self.node_features.shape[0] != self.num_nodes:
            raise ValueError(f"node_features has {self.node_features.shape[0]} rows, expected {self.num_nodes}")

    @property
    def num_relations(self) -> int:
        """R, the number of relations without their inverses."""
        return self.relation_features.shape[0] // 2

    @property
    def num_edges(self) -> int:
        """2T, the number of directed edges."""
        return self.edge_index.shape[1]

    def to(self, device: torch.device | str) -> GraphInputs:
        """A copy with every tensor on ``device``."""
        return GraphInputs(
            edge_index=self.edge_index.to(device),
            edge_type=self.edge_type.to(device),
            relation_features=self.relation_features.to(device),
            node_features=None if self.node_features is None else self.node_features.to(device),
            entity_passage_count=self.entity_passage_count.to(device),
            num_nodes=self.num_nodes,
        )


def relation_texts(index: KGIndex) -> list[str]:
    """The 2R names the relation features embed: ``r`` then ``inverse r`` for every relation, in edge-type order."""
    return list(index.relations) + [INVERSE_TEXT_PREFIX + r for r in index.relations]


def graph_inputs(index: KGIndex, embedder: TextEncoder | None = None, node_features: bool = True) -> GraphInputs:
    """Build the :class:`GraphInputs` of ``index``.

    Relation names (and ``inverse <r>`` for the reversed edges) are embedded
    with ``embedder`` (the offline MiniLM :class:`~glmrag.index.embed.Embedder`
    when None). ``node_features`` come from ``index.entity_embeddings`` when
    requested and present, else None.
    """
    if embedder is None:
        from glmrag.index.embed import Embedder

        embedder = Embedder()
    triples = torch.as_tensor(index.triples, dtype=torch.long).reshape(-1, 3)
    head, rel, tail = triples.unbind(1)  # (T,) each
    num_rel = index.num_relations
    edge_index = torch.stack([torch.cat([head, tail]), torch.cat([tail, head])])  # (2, 2T)
    edge_type = torch.cat([rel, rel + num_rel])  # (2T,)

    relation_features = torch.as_tensor(np.asarray(embedder.encode(relation_texts(index)), dtype=np.float32))
    nodes = None
    if node_features and index.entity_embeddings is not None:
        nodes = torch.as_tensor(np.asarray(index.entity_embeddings, dtype=np.float32))
    count = torch.as_tensor(np.asarray(index.entity_passage_count, dtype=np.float32))
    return GraphInputs(
        edge_index=edge_index,
        edge_type=edge_type,
        relation_features=relation_features,
        node_features=nodes,
        entity_passage_count=count,
        num_nodes=index.num_entities,
    )


def seed_weights(index: KGIndex, question_ids: Sequence[str]) -> torch.Tensor:
    """Shapes: ``question_ids`` (B,) -> (B, E) float32.

    Each linked seed entity of a question is weighted ``1 / |passages mentioning
    it|`` and every other entity 0, as GFM-RAG initialises the question entities
    (``init_entities_weight``, Luo et al. 2025): a seed named in many passages
    says less about which passage answers. GFM-RAG gives weight 0 to an entity
    found in no passage; here such a seed keeps weight 1 so that it still starts
    the propagation (GFM-RAG's own KGs have no such entity).
    """
    count = np.maximum(np.asarray(index.entity_passage_count, dtype=np.float32), 1.0)
    weight = np.zeros((len(question_ids), index.num_entities), dtype=np.float32)
    for row, qid in enumerate(question_ids):
        seeds = index.seeds(qid)
        weight[row, seeds] = 1.0 / count[seeds]
    return torch.from_numpy(weight)
