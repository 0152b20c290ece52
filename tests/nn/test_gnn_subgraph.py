"""QueryGNN restricted to per-question subgraphs (GLM-RAG §5.5, Table 3) against the GNN on each subgraph alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from glmrag.graph.subgraph import select_subgraph
from glmrag.models.losses import gfm_rag_loss
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.graph_inputs import GraphInputs
from glmrag.nn.subgraph_batch import SubgraphBatch

DIM = 16  # the hashed relation features of conftest.make_graph
N = 60


def tiny_config(**kw) -> GNNConfig:
    base = dict(hidden_channels=8, num_layers=3, question_dim=DIM, relation_dim=DIM, node_dim=DIM)
    return GNNConfig(**{**base, **kw})


def seed_weight(rows: list[list[int]], num_nodes: int = N) -> torch.Tensor:
    w = torch.zeros(len(rows), num_nodes)
    for b, ents in enumerate(rows):
        w[b, ents] = torch.arange(1, len(ents) + 1, dtype=torch.float32) / len(ents)  # unequal seed weights
    return w


def subgraph_kg(graph: GraphInputs, triples: np.ndarray) -> GraphInputs:
    """The KG made of ``triples`` only: same entity ids, relation ids and relation features."""
    t = torch.as_tensor(triples, dtype=torch.long).reshape(-1, 3)
    head, rel, tail = t.unbind(1)
    return dataclasses.replace(
        graph,
        edge_index=torch.stack([torch.cat([head, tail]), torch.cat([tail, head])]),
        edge_type=torch.cat([rel, rel + graph.num_relations]),
    )


@pytest.fixture
def setup(random_graph, make_graph):
    """A random KG, two questions with different seeds and their budgeted 2-hop subgraphs."""
    index = random_graph(N, 200, seed=3)
    seeds = [[4, 17], [30]]
    subs = [
        select_subgraph(index, s, max_hops=2, max_triplets=budget, seed=b)
        for b, (s, budget) in enumerate(zip(seeds, (25, 40), strict=True))
    ]
    assert all(s.truncated for s in subs)  # the budget binds: the restriction matters
    batch = SubgraphBatch.from_triples(
        [index.triples[s.triples] for s in subs], [s.entities for s in subs], index.num_relations
    )
    return index, make_graph(index), seeds, subs, batch


def test_subgraph_batch_layout():
    triples = [np.array([[5, 1, 7], [7, 0, 2]]), np.array([[9, 1, 9]])]
    entities = [np.array([7, 5, 2]), np.array([9, 3])]
    sub = SubgraphBatch.from_triples(triples, entities, num_relations=2)
    assert sub.node_entity.tolist() == [7, 5, 2, 9, 3] and sub.node_question.tolist() == [0, 0, 0, 1, 1]
    # h -> t of every triple, then t -> h; local node ids offset per question
    assert sub.edge_index.tolist() == [[1, 0, 3, 0, 2, 3], [0, 2, 3, 1, 0, 3]]
    assert sub.relation_ids[sub.edge_relation].tolist() == [1, 0, 1, 3, 2, 3]
    mask = sub.entity_mask(10)
    assert mask.sum().item() == 5 and mask[0, [2, 5, 7]].all() and mask[1, [3, 9]].all() and not mask[1, 7]
    with pytest.raises(ValueError, match="batch row 1"):
        SubgraphBatch.from_triples(triples, [entities[0], np.array([3])], num_relations=2)
    with pytest.raises(ValueError, match="batch row 0"):
        SubgraphBatch.from_triples([np.array([[1, 0, 2]])], [np.empty(0, np.int64)], num_relations=1)
    with pytest.raises(ValueError, match="batch row 1"):
        SubgraphBatch.from_triples(triples, [entities[0], np.array([9, 9])], num_relations=2)


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"use_node_features": True, "query_injection": "all"},
        {"use_node_features": True, "query_injection": "seeds"},
    ],
)
def test_restricted_equals_the_gnn_on_the_subgraph_kg(setup, variant):
    """The reference: each question's logits on its subgraph entities equal the unrestricted GNN run on a KG
    of only that question's subgraph triples; every other entity gets -inf."""
    index, graph, seeds, subs, batch = setup
    torch.manual_seed(0)
    graph.node_features = torch.randn(N, DIM) if variant else None
    model = QueryGNN(tiny_config(**variant)).eval()
    query, weight = torch.randn(2, DIM), seed_weight(seeds)
    with torch.no_grad():
        restricted = model(graph, query, weight, subgraphs=batch)  # (2, N)
        whole = model(graph, query, weight)
    for b, sub in enumerate(subs):
        alone = model(subgraph_kg(graph, index.triples[sub.triples]), query[b : b + 1], weight[b : b + 1])[0]
        ents = torch.as_tensor(sub.entities)
        torch.testing.assert_close(restricted[b, ents], alone[ents].detach(), atol=1e-5, rtol=0)
        outside = torch.ones(N, dtype=torch.bool)
        outside[ents] = False
        assert torch.isneginf(restricted[b, outside]).all() and outside.any()
        # the restriction changes the scores: the whole KG reaches these entities along more edges
        assert (restricted[b, ents] - whole[b, ents]).abs().max() > 1e-3


def test_a_batch_equals_its_questions_one_at_a_time(setup):
    index, graph, seeds, subs, batch = setup
    torch.manual_seed(1)
    model = QueryGNN(tiny_config()).eval()
    query, weight = torch.randn(2, DIM), seed_weight(seeds)
    with torch.no_grad():
        together = model(graph, query, weight, subgraphs=batch)
        for b, sub in enumerate(subs):
            one = SubgraphBatch.from_triples([index.triples[sub.triples]], [sub.entities], index.num_relations)
            torch.testing.assert_close(
                together[b : b + 1], model(graph, query[b : b + 1], weight[b : b + 1], subgraphs=one), atol=1e-5, rtol=0
            )
    assert not torch.equal(torch.isfinite(together[0]), torch.isfinite(together[1]))  # different subgraphs


def test_whole_kg_as_the_subgraph_reproduces_the_unrestricted_gnn(random_graph, make_graph):
    index = random_graph(N, 150, seed=5)
    graph = make_graph(index)
    torch.manual_seed(2)
    model = QueryGNN(tiny_config()).eval()
    query, weight = torch.randn(2, DIM), seed_weight([[1], [2, 8]])
    everything = SubgraphBatch.from_triples([index.triples] * 2, [np.arange(N)] * 2, index.num_relations)
    with torch.no_grad():
        torch.testing.assert_close(
            model(graph, query, weight, subgraphs=everything), model(graph, query, weight), atol=1e-5, rtol=0
        )


def test_questions_without_subgraph_score_nothing(setup):
    index, graph, seeds, subs, _ = setup
    empty = select_subgraph(index, [], 2, 40)
    batch = SubgraphBatch.from_triples(
        [np.empty((0, 3)), index.triples[subs[1].triples]], [empty.entities, subs[1].entities], index.num_relations
    )
    model = QueryGNN(tiny_config())
    logits = model(graph, torch.randn(2, DIM), seed_weight([[], seeds[1]]), subgraphs=batch)
    assert torch.isneginf(logits[0]).all() and torch.isfinite(logits[1]).sum() == len(subs[1].entities)
    nothing = SubgraphBatch.from_triples([np.empty((0, 3))], [empty.entities], index.num_relations)
    assert torch.isneginf(model(graph, torch.randn(1, DIM), seed_weight([[]]), subgraphs=nothing)).all()


def test_masked_edges_have_no_effect_and_no_gradient(setup, kg, make_graph):
    """Edges, relations and entities outside every subgraph neither change the logits nor get a gradient."""
    index, graph, seeds, subs, batch = setup
    torch.manual_seed(3)
    inside = np.zeros(N, dtype=bool)
    inside[np.concatenate([s.entities for s in subs])] = True
    a, b, c = np.flatnonzero(~inside)[:3]
    # the same KG plus triples among entities outside the subgraphs, one of a new relation r4
    extra = np.array([[a, 4, b], [b, 0, c], [c, 2, a]])
    wider = make_graph(kg(np.concatenate([index.triples, extra]), N))
    wider_batch = SubgraphBatch.from_triples([index.triples[s.triples] for s in subs], [s.entities for s in subs], 5)
    model = QueryGNN(tiny_config(use_node_features=True))
    features = torch.randn(N, DIM, requires_grad=True)
    relations = wider.relation_features.clone().requires_grad_(True)
    wider = dataclasses.replace(wider, node_features=features, relation_features=relations)
    query, weight = torch.randn(2, DIM), seed_weight(seeds)
    logits = model(wider, query, weight, subgraphs=wider_batch)
    with torch.no_grad():
        plain = dataclasses.replace(graph, node_features=features.detach())
        torch.testing.assert_close(logits.detach(), model(plain, query, weight, subgraphs=batch))

    target = torch.zeros(2, N)
    target[0, subs[0].entities[-3:]] = target[1, subs[1].entities[-2:]] = 1.0
    gfm_rag_loss(logits, target, wider_batch.entity_mask(N)).backward()
    assert (features.grad[~inside] == 0).all() and (features.grad[inside] != 0).any(-1).all()
    used = np.zeros(2 * wider.num_relations, dtype=bool)
    used[wider_batch.relation_ids.numpy()] = True
    assert not used[[4, 9]].any()  # r4 and its inverse appear only outside the subgraphs
    assert (relations.grad[~used] == 0).all() and (relations.grad[used] != 0).any(-1).all()


def test_argument_checks(setup):
    _, graph, seeds, _, batch = setup
    model = QueryGNN(tiny_config())
    with pytest.raises(ValueError, match="cannot be combined"):
        model(graph, torch.randn(2, DIM), seed_weight(seeds), torch.ones(graph.num_edges, dtype=torch.bool), batch)
    with pytest.raises(ValueError, match="hold 2 questions but the batch has 1"):
        model(graph, torch.randn(1, DIM), seed_weight(seeds[:1]), subgraphs=batch)
