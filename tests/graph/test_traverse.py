import networkx as nx
import pytest

from glmrag.graph.traverse import bfs_distances, neighbourhood_triples
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
