"""KG-completion pretraining of the GFM-RAG GNN (Luo et al. 2025; GLM-RAG §4.2.1).

GFM-RAG pretrains its :class:`~glmrag.nn.gnn.QueryGNN` to answer ``(h, r, ?)``: the query is the
relation's own projected feature, the head the only seed, and the true tail is scored against
:data:`NUM_NEGATIVES` strict negatives with self-adversarial BCE (:func:`kgc_loss`). As in GFM-RAG (its
``QueryGNN.forward`` calls NBFNet/ULTRA's ``remove_easy_edges``), ``hide_target_edges=True`` hides both
directions of the batch's target triples from message passing, so the model has to find other paths;
``False`` lets it see them. GFM-RAG* skips this stage (GLM-RAG §5.1).
Provenance of the constants: ``docs/fidelity.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from glmrag.nn.gnn import QueryGNN
from glmrag.nn.graph_inputs import GraphInputs

NUM_NEGATIVES = 256
"""Negatives per positive (GFM-RAG ``stage2_kg_pretrain.yaml``, ``num_negative``)."""
ADVERSARIAL_TEMPERATURE = 1.0
"""Self-adversarial temperature of the pretraining BCE (GFM-RAG ``stage2_kg_pretrain.yaml``)."""
MAX_RESAMPLING_ROUNDS = 100


@dataclass
class KGCBatch:
    """Tail-prediction queries ``(head, relation, ?)`` with their answers, negatives and the edges to hide."""

    head: torch.Tensor
    """(B,) long: the seed entity of each query."""
    relation: torch.Tensor
    """(B,) long in ``[0, 2R)``; ``r + R`` asks for the heads of relation ``r``."""
    tail: torch.Tensor
    """(B,) long: the true tail of each query."""
    negatives: torch.Tensor
    """(B, K) long: entities that are not tails of ``(head, relation)`` in the KG or in the sampled triples."""
    edge_mask: torch.Tensor | None
    """(2T,) bool over ``graph.edge_index``: False for both directions of every query triple of the batch;
    None when the target edges stay visible (``hide_target_edges=False``)."""


def _keys(src: torch.Tensor, rel: torch.Tensor, dst: torch.Tensor, num_types: int, num_nodes: int) -> torch.Tensor:
    """One int64 per directed typed edge (unique while ``num_nodes**2 * num_types < 2**63``)."""
    return (src * num_types + rel) * num_nodes + dst


def _inverse(rel: torch.Tensor, num_relations: int) -> torch.Tensor:
    return torch.where(rel < num_relations, rel + num_relations, rel - num_relations)


def sample_kgc_batch(
    graph: GraphInputs,
    triples: torch.Tensor,
    batch_size: int | None,
    num_negatives: int = NUM_NEGATIVES,
    generator: torch.Generator | None = None,
    hide_target_edges: bool = True,
) -> KGCBatch:
    """Draw ``batch_size`` training triples (with replacement) and turn them into tail-prediction queries.

    ``batch_size=None`` uses every row of ``triples`` once, in order (for a
    DataLoader that already batches the triples).

    The first ``ceil(batch_size / 2)`` queries predict tails ``(h, r, ?)`` and
    the rest predict heads as tails of the inverse relation ``(t, r + R, ?)``, as
    NBFNet and ULTRA split a batch between tail and head corruption. Negatives
    are drawn uniformly among the entities that are not true answers
    (strict negatives), by rejection. Sampling runs on the CPU; the batch is
    returned on the graph's device. ``hide_target_edges`` masks both directions of every query triple
    out of the message passing (NBFNet/ULTRA); GFM-RAG keeps them (the default).

    Shapes: **triples** ``(T', 3)`` long rows ``(h, r, t)`` with ``r < R``, usually all of the KG's.
    """
    device = graph.edge_index.device
    triples = torch.as_tensor(triples, dtype=torch.long).cpu().reshape(-1, 3)
    if len(triples) == 0:
        raise ValueError("sample_kgc_batch needs at least one triple")
    num_nodes, num_rel = graph.num_nodes, graph.num_relations
    num_types = 2 * num_rel

    if batch_size is None:
        batch_size = len(triples)
        pick = torch.arange(batch_size)
    else:
        pick = torch.randint(len(triples), (batch_size,), generator=generator)
    h, r, t = triples[pick].unbind(1)  # (B,) each
    flip = torch.arange(batch_size) >= (batch_size + 1) // 2
    head = torch.where(flip, t, h)
    tail = torch.where(flip, h, t)
    relation = torch.where(flip, r + num_rel, r)

    # Every (src, type, dst) the KG or the training triples assert, both directions.
    src, dst = graph.edge_index.cpu()
    th, tr, tt = triples.unbind(1)
    known = torch.cat(
        [
            _keys(src, graph.edge_type.cpu(), dst, num_types, num_nodes),
            _keys(th, tr, tt, num_types, num_nodes),
            _keys(tt, tr + num_rel, th, num_types, num_nodes),
        ]
    ).unique()  # sorted

    negatives = torch.randint(num_nodes, (batch_size, num_negatives), generator=generator)  # (B, K)
    query_key = _keys(head, relation, torch.zeros_like(head), num_types, num_nodes).unsqueeze(1)  # (B, 1)
    for _ in range(MAX_RESAMPLING_ROUNDS):
        bad = torch.isin(query_key + negatives, known)  # (B, K)
        if not bool(bad.any()):
            break
        negatives[bad] = torch.randint(num_nodes, (int(bad.sum()),), generator=generator)
    else:
        raise RuntimeError(
            f"could not draw {num_negatives} strict negatives in {MAX_RESAMPLING_ROUNDS} rounds: some query "
            "(head, relation) has almost every entity as a true tail; lower num_negatives"
        )

    edge_mask = None
    if hide_target_edges:  # both directions of every query triple of the batch (parallel copies included)
        edge_key = _keys(src, graph.edge_type.cpu(), dst, num_types, num_nodes)  # (2T,)
        query_edges = torch.cat(
            [
                _keys(head, relation, tail, num_types, num_nodes),
                _keys(tail, _inverse(relation, num_rel), head, num_types, num_nodes),
            ]
        )
        edge_mask = ~torch.isin(edge_key, query_edges)  # (2T,)
    return KGCBatch(
        head=head.to(device),
        relation=relation.to(device),
        tail=tail.to(device),
        negatives=negatives.to(device),
        edge_mask=None if edge_mask is None else edge_mask.to(device),
    )


def kgc_loss(
    model: QueryGNN,
    graph: GraphInputs,
    batch: KGCBatch,
    adversarial_temperature: float = ADVERSARIAL_TEMPERATURE,
) -> torch.Tensor:
    """Self-adversarial BCE of the true tail against the batch's negatives (NBFNet, Zhu et al. 2021).

    Per query, the positive has weight 1 and the negatives
    ``softmax(logit / adversarial_temperature)`` without gradient (Sun et al.
    2019); the query's loss is ``sum(w * bce) / sum(w)``. The message passing
    runs without the edges ``batch.edge_mask`` hides (none unless the batch hides its target edges).

    Shapes: returns a scalar.
    """
    logits = model.kgc_forward(graph, batch.head, batch.relation, edge_mask=batch.edge_mask)  # (B, E)
    candidates = torch.cat([batch.tail.unsqueeze(1), batch.negatives], dim=1)  # (B, 1 + K)
    pred = logits.gather(1, candidates)  # (B, 1 + K)
    target = torch.zeros_like(pred)
    target[:, 0] = 1.0
    bce = F.binary_cross_entropy_with_logits(pred, target, reduction="none")  # (B, 1 + K)
    weight = torch.ones_like(pred)
    with torch.no_grad():
        if adversarial_temperature > 0:
            weight[:, 1:] = torch.softmax(pred[:, 1:] / adversarial_temperature, dim=-1)
        else:
            weight[:, 1:] = 1.0 / batch.negatives.shape[1]
    return ((weight * bce).sum(-1) / weight.sum(-1)).mean()
