"""KG-completion pretraining: strict negatives, hidden target edges, a loss that goes down."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.kgc import kgc_loss, sample_kgc_batch

DIM = 16


def model_for(hidden: int = 16, layers: int = 2) -> QueryGNN:
    cfg = GNNConfig(hidden_channels=hidden, num_layers=layers, question_dim=DIM, relation_dim=DIM, node_dim=DIM)
    return QueryGNN(cfg)


def true_tails(index) -> dict[tuple[int, int], set[int]]:
    """(head, edge type) -> tails, over both directions of every triple."""
    out: dict[tuple[int, int], set[int]] = {}
    for h, r, t in index.triples.tolist():
        out.setdefault((h, r), set()).add(t)
        out.setdefault((t, r + index.num_relations), set()).add(h)
    return out


def test_batch_queries_and_strict_negatives(random_graph, make_graph):
    index = random_graph(30, 90, seed=3)
    graph = make_graph(index)
    triples = torch.as_tensor(index.triples)
    batch = sample_kgc_batch(graph, triples, 9, num_negatives=20, generator=torch.Generator().manual_seed(0))
    assert batch.negatives.shape == (9, 20)
    assert batch.edge_mask is not None and not batch.edge_mask.all()  # GFM-RAG hides the target edges
    visible = sample_kgc_batch(graph, triples, 9, 20, torch.Generator().manual_seed(0), hide_target_edges=False)
    assert visible.edge_mask is None
    tails = true_tails(index)
    r = index.num_relations
    assert (batch.relation[:5] < r).all() and (batch.relation[5:] >= r).all()  # 5 tail, 4 head queries
    rows = zip(batch.head.tolist(), batch.relation.tolist(), batch.tail.tolist(), batch.negatives.tolist(), strict=True)
    for h, rel, t, neg in rows:
        assert t in tails[(h, rel)]  # the query is a real fact
        assert not set(neg) & tails[(h, rel)]  # no negative is a true tail (strict negatives)


def test_batch_of_given_triples(random_graph, make_graph):
    index = random_graph(30, 90, seed=3)
    triples = torch.as_tensor(index.triples[:5])
    batch = sample_kgc_batch(make_graph(index), triples, None, num_negatives=4)
    r = index.num_relations
    assert batch.head.tolist() == triples[:3, 0].tolist() + triples[3:, 2].tolist()
    assert batch.relation.tolist() == triples[:3, 1].tolist() + (triples[3:, 1] + r).tolist()
    assert batch.tail.tolist() == triples[:3, 2].tolist() + triples[3:, 0].tolist()


def test_target_edges_are_hidden(random_graph, make_graph):
    index = random_graph(30, 90, seed=4)
    graph = make_graph(index)
    batch = sample_kgc_batch(
        graph,
        torch.as_tensor(index.triples),
        6,
        num_negatives=8,
        generator=torch.Generator().manual_seed(1),
        hide_target_edges=True,  # GFM-RAG's remove_easy_edges (NBFNet/ULTRA), the default
    )
    r = index.num_relations
    query = {
        (h, rel, t) for h, rel, t in zip(batch.head.tolist(), batch.relation.tolist(), batch.tail.tolist(), strict=True)
    }
    hidden = query | {(t, (rel + r) % (2 * r), h) for h, rel, t in query}
    for e in range(graph.num_edges):
        edge = (int(graph.edge_index[0, e]), int(graph.edge_type[e]), int(graph.edge_index[1, e]))
        assert bool(batch.edge_mask[e]) == (edge not in hidden), edge
    assert (~batch.edge_mask).sum() >= 2 * len(query)

    # kgc_loss runs the message passing on the graph without those edges
    torch.manual_seed(0)
    model = model_for()
    pruned = dataclasses.replace(
        graph, edge_index=graph.edge_index[:, batch.edge_mask], edge_type=graph.edge_type[batch.edge_mask]
    )
    logits = model.kgc_forward(pruned, batch.head, batch.relation)
    pred = logits.gather(1, torch.cat([batch.tail[:, None], batch.negatives], 1))
    target = torch.zeros_like(pred)
    target[:, 0] = 1
    weight = torch.ones_like(pred)
    weight[:, 1:] = torch.softmax(pred[:, 1:].detach(), -1)  # adversarial temperature 1
    expected = ((weight * F.binary_cross_entropy_with_logits(pred, target, reduction="none")).sum(1) / 2).mean()
    assert kgc_loss(model, graph, batch).item() == pytest.approx(expected.item(), abs=1e-6)
    unmasked = dataclasses.replace(batch, edge_mask=torch.ones_like(batch.edge_mask))
    assert kgc_loss(model, graph, unmasked).item() != pytest.approx(expected.item(), abs=1e-6)


def test_target_edges_are_hidden_by_default_as_in_gfm_rag(random_graph, make_graph):
    """GFM-RAG's ``QueryGNN.forward`` removes the batch's target edges (``remove_easy_edges``) before message
    passing: the default loss is the loss without them, and differs from the loss on the whole KG."""
    index = random_graph(30, 90, seed=4)
    graph = make_graph(index)
    triples = torch.as_tensor(index.triples)
    default = sample_kgc_batch(graph, triples, 6, num_negatives=8, generator=torch.Generator().manual_seed(1))
    visible = sample_kgc_batch(
        graph, triples, 6, num_negatives=8, generator=torch.Generator().manual_seed(1), hide_target_edges=False
    )
    torch.manual_seed(0)
    model = model_for()
    hidden = dataclasses.replace(visible, edge_mask=default.edge_mask)
    assert kgc_loss(model, graph, default).item() == pytest.approx(kgc_loss(model, graph, hidden).item(), abs=1e-7)
    assert kgc_loss(model, graph, default).item() != pytest.approx(kgc_loss(model, graph, visible).item(), abs=1e-6)


def test_kgc_query_is_the_projected_relation(random_graph, make_graph):
    torch.manual_seed(0)
    graph = make_graph(random_graph(20, 50))
    model = model_for().eval()
    head, rel = torch.tensor([3, 7]), torch.tensor([1, 5])
    query = model.relation_proj(graph.relation_features[rel])
    expected = model.score(graph, query, F.one_hot(head, 20).float())
    torch.testing.assert_close(model.kgc_forward(graph, head, rel), expected)


def paired_kg(kg, num_entities: int, num_facts: int, seed: int):
    """Every fact stated twice, with relations 0 and 1: hiding one copy leaves the other to find."""
    gen = torch.Generator().manual_seed(seed)
    h, t = torch.randint(num_entities, (2, num_facts), generator=gen)
    triples = [[a, r, b] for r in (0, 1) for a, b in zip(h.tolist(), t.tolist(), strict=True)]
    return kg(triples, num_entities, [[i] for i in range(num_entities)])


def test_pretraining_loss_decreases(kg, make_graph):
    torch.manual_seed(0)
    index = paired_kg(kg, 30, 40, seed=0)
    graph = make_graph(index)
    triples = torch.as_tensor(index.triples)
    gen = torch.Generator().manual_seed(0)
    held = sample_kgc_batch(graph, triples, 16, num_negatives=16, generator=gen)
    model = model_for(hidden=32)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torch.no_grad():
        before = kgc_loss(model, graph, held).item()
    for _ in range(30):
        opt.zero_grad()
        kgc_loss(model, graph, sample_kgc_batch(graph, triples, 32, num_negatives=16, generator=gen)).backward()
        opt.step()
    with torch.no_grad():
        after = kgc_loss(model, graph, held).item()
    # measured on this batch: 0.71 -> 0.23 (other seeds: 0.69 -> 0.07 to 0.35)
    assert after < 0.6 * before, (before, after)
