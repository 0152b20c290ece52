import networkx as nx
import numpy as np
import pytest

from glmrag.graph.traverse import bfs_distances, hop_distances, neighbourhood_triples, triples_within
from glmrag.index.synthetic import random_kg


def _undirected(index):
    g = nx.Graph()
    g.add_nodes_from(range(index.num_entities))
    g.add_edges_from((int(h), int(t)) for h, _, t in index.triples)
    return g


@pytest.mark.parametrize("cutoff", [1, 2, 10])
def test_bfs_distances_match_networkx(cutoff):
    index = random_kg(300, 500, seed=3)
    seeds = [0, 17, 42]
    expected = nx.multi_source_dijkstra_path_length(_undirected(index), seeds, cutoff=cutoff)
    assert bfs_distances(index, seeds, cutoff=cutoff) == dict(expected)


def test_neighbourhood_triples_counts_edges_leaving_inner_ball():
    index = random_kg(200, 300, seed=5)
    seeds = [1, 2]
    inner = {v for v, d in bfs_distances(index, seeds, cutoff=1).items() if d <= 1}
    expected = sum(1 for h, _, t in index.triples if int(h) in inner or int(t) in inner)
    assert neighbourhood_triples(index, seeds, hops=2) == expected


def _brute_force_density(index, inner):
    return sum(1 for h, _, t in index.triples if int(h) in inner or int(t) in inner)


@pytest.mark.parametrize("seed", range(6))
def test_hop_distances_equal_networkx_on_random_kgs(seed):
    """Independent reference: networkx BFS on random KGs (hubs, parallel triples, self-loops, isolated nodes)."""
    rng = np.random.default_rng(seed)
    index = random_kg(int(rng.integers(20, 400)), int(rng.integers(10, 700)), seed=seed)
    graph = _undirected(index)
    for n_seeds in (0, 1, 4):
        seeds = rng.choice(index.num_entities, size=n_seeds, replace=False).tolist()
        for cutoff in (0, 1, 3, 10):
            dist = hop_distances(index, seeds, cutoff=cutoff)
            expected = nx.multi_source_dijkstra_path_length(graph, seeds, cutoff=cutoff) if seeds else {}
            assert dist.shape == (index.num_entities,)
            assert {v: int(d) for v, d in enumerate(dist) if d >= 0} == dict(expected)
            # density (radius 1) read from the same search equals the count over the 1-hop ball
            if cutoff >= 1:
                ball = {v for v, d in expected.items() if d <= 1}
                assert triples_within(index, dist, 1) == _brute_force_density(index, ball)


def test_hop_distances_dtype_follows_cutoff():
    index = random_kg(50, 80, seed=1)
    assert hop_distances(index, [0], cutoff=10).dtype == np.int8
    assert hop_distances(index, [0], cutoff=200).dtype == np.int32
    with pytest.raises(ValueError, match="cutoff"):
        hop_distances(index, [0], cutoff=-1)
    assert neighbourhood_triples(index, [0], hops=0) == 0
