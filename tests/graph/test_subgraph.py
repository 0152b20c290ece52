import networkx as nx
import numpy as np
import pytest

from glmrag.graph.subgraph import select_subgraph, subgraph_prefix_entities
from glmrag.graph.traverse import bfs_distances, incident_edges, neighbourhood_triples

# Hand-made graph, seeds {0, 1}:
#   t0 (0,1) t1 (1,0): join the seeds            -> selected first
#   t2 (0,2) t3 (3,1) t6 (0,0) self-loop: hop 1  (t6 joins a seed to itself: not seed-connecting)
#   t4 (2,4) t7 (2,3): hop 2                      (t7 is reached from both 2 and 3, counted once)
#   t5 (4,5) t9 (4,8): hop 3                      -> outside max_hops=2
#   t8 (6,7): disconnected
HAND = [(0, 0, 1), (1, 1, 0), (0, 0, 2), (3, 0, 1), (2, 1, 4), (4, 0, 5), (0, 0, 0), (2, 0, 3), (6, 0, 7), (4, 1, 8)]


@pytest.fixture
def hand(kg):
    return kg(HAND, num_entities=9)


def test_hand_graph_full_neighbourhood(hand):
    sub = select_subgraph(hand, [0, 1], max_hops=2, max_triplets=600)
    t = sub.triples.tolist()
    assert set(t[:2]) == {0, 1}
    assert set(t[2:5]) == {2, 3, 6}
    assert set(t[5:]) == {4, 7}
    assert sub.hop.tolist() == [1, 1, 1, 1, 1, 2, 2]
    assert sub.entities[:2].tolist() == [0, 1]
    assert set(sub.entities.tolist()) == {0, 1, 2, 3, 4}
    assert sub.seeds.tolist() == [0, 1]
    assert not sub.truncated
    assert len(sub) == neighbourhood_triples(hand, [0, 1], hops=2) == 7


@pytest.mark.parametrize(
    "max_hops, budget, expect_first, expect_total, truncated",
    [
        (2, 0, [], 0, True),
        (2, 1, [], 1, True),
        (2, 2, [{0, 1}], 2, True),
        (2, 4, [{0, 1}], 4, True),
        (2, 5, [{0, 1}, {2, 3, 6}], 5, True),  # budget spent exactly at the end of hop 1; hop 2 is left out
        (2, 7, [{0, 1}, {2, 3, 6}, {4, 7}], 7, False),
        (1, 600, [{0, 1}, {2, 3, 6}], 5, False),
        (3, 600, [{0, 1}, {2, 3, 6}, {4, 7}, {5, 9}], 9, False),
    ],
)
def test_hand_graph_budgets(hand, max_hops, budget, expect_first, expect_total, truncated):
    sub = select_subgraph(hand, [0, 1], max_hops=max_hops, max_triplets=budget)
    assert len(sub) == expect_total
    assert sub.truncated is truncated
    start = 0
    for group in expect_first:
        assert set(sub.triples[start : start + len(group)].tolist()) == group
        start += len(group)
    if budget == 1:
        assert sub.triples.tolist()[0] in (0, 1)  # a seed-connecting triple comes first


def test_degenerate_inputs(hand):
    assert len(select_subgraph(hand, [])) == 0
    none = select_subgraph(hand, [2, 2], max_hops=0)
    assert len(none) == 0 and none.entities.tolist() == [2] and not none.truncated
    assert select_subgraph(hand, [1, 0, 1]).seeds.tolist() == [1, 0]
    leaf = select_subgraph(hand, [8], max_hops=1)  # entity 8 has one triple
    assert leaf.triples.tolist() == [9] and leaf.entities.tolist() == [8, 4]
    with pytest.raises(ValueError, match="outside"):
        select_subgraph(hand, [42])
    with pytest.raises(ValueError, match="max_hops"):
        select_subgraph(hand, [0], max_hops=-1)


def test_incident_edges_matches_csr_slices(random_graph):
    index = random_graph(200, 600, seed=3)
    adj = index.adjacency
    nodes = np.array([5, 0, 17, 5, 199])
    expected = np.concatenate([np.arange(adj.indptr[v], adj.indptr[v + 1]) for v in nodes])
    assert incident_edges(adj.indptr, nodes).tolist() == expected.tolist()
    assert incident_edges(adj.indptr, np.empty(0, np.int64)).size == 0


def _networkx_neighbourhood(index, seeds, max_hops):
    """Triples a ``max_hops``-level BFS traverses, from networkx: ego_graph around a super-source."""
    g = nx.MultiGraph()
    g.add_nodes_from(range(index.num_entities))
    g.add_edges_from((int(h), int(t), k) for k, (h, _, t) in enumerate(index.triples))
    g.add_edges_from(("S", s) for s in seeds)
    ego = nx.ego_graph(g, "S", radius=max_hops + 1)
    dist = nx.single_source_shortest_path_length(g, "S", cutoff=max_hops + 1)
    return {
        k
        for u, v, k in ego.edges(keys=True)
        if "S" not in (u, v) and min(dist[u], dist[v]) - 1 <= max_hops - 1  # an endpoint within max_hops - 1
    }


@pytest.mark.parametrize("graph_seed", range(4))
@pytest.mark.parametrize("max_hops", [1, 2, 3])
def test_fitting_neighbourhood_equals_networkx(random_graph, graph_seed, max_hops):
    index = random_graph(300, 700, seed=graph_seed)
    rng = np.random.default_rng(graph_seed)
    for _ in range(5):
        seeds = rng.choice(index.num_entities, rng.integers(1, 4), replace=False).tolist()
        sub = select_subgraph(index, seeds, max_hops=max_hops, max_triplets=10**6, seed=graph_seed)
        expected = _networkx_neighbourhood(index, seeds, max_hops)
        assert not sub.truncated
        assert len(sub.triples) == len(set(sub.triples.tolist()))
        assert set(sub.triples.tolist()) == expected
        assert len(sub) == neighbourhood_triples(index, seeds, hops=max_hops)


@pytest.mark.parametrize("graph_seed", range(3))
def test_truncated_selection_follows_bfs_order(random_graph, graph_seed):
    index = random_graph(2000, 6000, seed=graph_seed, hubs=5)
    rng = np.random.default_rng(graph_seed)
    t = index.triples
    for _ in range(10):
        seeds = rng.choice(index.num_entities, rng.integers(2, 5), replace=False).tolist()
        budget = int(rng.integers(5, 150))
        sub = select_subgraph(index, seeds, max_hops=2, max_triplets=budget, seed=int(rng.integers(100)))
        full = neighbourhood_triples(index, seeds, hops=2)
        assert len(sub) == min(budget, full) and sub.truncated == (full > budget)
        assert len(set(sub.triples.tolist())) == len(sub)
        # each triple is selected at the hop where the BFS first reaches it, hops in order
        dist = bfs_distances(index, seeds, cutoff=3)
        near = [min(dist.get(int(h), 99), dist.get(int(tl), 99)) for h, _, tl in t[sub.triples]]
        assert sub.hop.tolist() == [d + 1 for d in near]
        assert max(sub.hop.tolist(), default=1) <= 2 and sub.hop.tolist() == sorted(sub.hop.tolist())
        # seed-connecting triples come first
        is_seed = np.isin(t[:, [0, 2]], seeds).all(axis=1) & (t[:, 0] != t[:, 2])
        joining = int(is_seed.sum())
        assert is_seed[sub.triples[: min(joining, budget)]].all()
        assert set(sub.entities[: len(seeds)].tolist()) == set(seeds)
        assert set(sub.entities.tolist()) == set(seeds) | set(t[sub.triples][:, [0, 2]].ravel().tolist())


def test_deterministic_and_seed_dependent(random_graph):
    index = random_graph(2000, 6000, seed=7, hubs=5)
    seeds = np.flatnonzero(index.adjacency.degree() > 50)[:2].tolist()
    a = select_subgraph(index, seeds, max_triplets=100, seed=1)
    b = select_subgraph(index, seeds, max_triplets=100, seed=1)
    c = select_subgraph(index, seeds, max_triplets=100, seed=2)
    assert a.truncated
    assert np.array_equal(a.triples, b.triples) and np.array_equal(a.entities, b.entities)
    assert set(a.triples.tolist()) != set(c.triples.tolist())


def test_smaller_budgets_and_fewer_hops_select_prefixes(random_graph):
    index = random_graph(2000, 6000, seed=11, hubs=5)
    rng = np.random.default_rng(0)
    for _ in range(10):
        seeds = rng.choice(index.num_entities, 2, replace=False).tolist()
        big = select_subgraph(index, seeds, max_hops=3, max_triplets=800, seed=5)
        for hops in (1, 2, 3):
            within = int((big.hop <= hops).sum())
            for budget in (0, 10, 100, 800):
                small = select_subgraph(index, seeds, max_hops=hops, max_triplets=budget, seed=5)
                n = min(budget, within)
                assert small.triples.tolist() == big.triples[:n].tolist()
                assert sorted(small.entities.tolist()) == subgraph_prefix_entities(index, big, n).tolist()
