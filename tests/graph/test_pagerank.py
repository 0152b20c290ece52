"""The one power iteration of PPR and HyperAddress, against networkx.pagerank and a hand-solved chain."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from glmrag.graph.pagerank import Walk, iterations_for, personalized_pagerank, transition


def random_digraph(seed: int, n: int = 40) -> tuple[sp.csr_matrix, nx.DiGraph]:
    """A weighted directed graph with self-loops and dangling nodes, as a weight matrix and for networkx."""
    rng = np.random.default_rng(seed)
    weights = rng.random((n, n)) * (rng.random((n, n)) < 0.08)  # sparse, some nodes without out-edges
    weights[np.arange(0, n, 7), np.arange(0, n, 7)] = 2.0  # self-loops
    weights[[3, 11, 29]] = 0.0  # dangling, even where a self-loop was set
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_weighted_edges_from((int(u), int(v), float(weights[u, v])) for u, v in zip(*np.nonzero(weights), strict=True))
    return sp.csr_matrix(weights), g


def restarts(rng: np.random.Generator, n: int, columns: int, dangling: np.ndarray) -> np.ndarray:
    """(n, columns) sparse restart distributions, one of them on a dangling node."""
    r = rng.random((n, columns)) * (rng.random((n, columns)) < 0.2)
    r[np.flatnonzero(dangling)[0], 0] += 1.0
    return r / r.sum(axis=0)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("damping", [0.0, 0.5, 0.85, 0.95])
def test_matches_networkx_pagerank_with_personalization(seed, damping):
    weights, g = random_digraph(seed)
    transition_t, dangling = transition(weights)
    assert dangling.tolist() == (np.asarray(weights.sum(axis=1)).ravel() == 0).tolist()
    assert dangling.sum() >= 3 and weights.diagonal().any()
    walk = Walk(transition_t, dangling)
    r = restarts(np.random.default_rng(10 + seed), g.number_of_nodes(), 3, dangling)
    x = personalized_pagerank(walk, r, damping, tol=1e-12)
    for b in range(r.shape[1]):
        personalization = dict(enumerate(r[:, b]))
        ref = nx.pagerank(g, alpha=damping, personalization=personalization, weight="weight", tol=1e-15, max_iter=10000)
        expected = np.array([ref[v] for v in range(g.number_of_nodes())])
        assert np.abs(x[:, b] - expected).sum() < 1e-9
        assert x[:, b].sum() == pytest.approx(1.0, abs=1e-12)


def test_float32_stays_within_the_tolerance():
    weights, g = random_digraph(5)
    walk = Walk(*transition(weights))
    r = restarts(np.random.default_rng(0), g.number_of_nodes(), 2, walk.dangling)
    x32 = personalized_pagerank(walk, r, 0.5, tol=1e-6, dtype=np.float32)
    x64 = personalized_pagerank(walk, r, 0.5, tol=1e-14)
    assert x32.dtype == np.float32
    assert np.abs(x32 - x64).sum(axis=0).max() < 1e-6


def test_hand_solved_chain():
    # 0 -> 1 (weight 1), 0 -> 2 (weight 3), 1 -> 1 (self-loop), 2 dangling; restart on 0, damping 1/2:
    # x0 = 1/2 + 1/2 * x2 (dangling mass back to node 0), x1 = 1/2 (x0 / 4 + x1), x2 = 1/2 * 3/4 x0
    weights = sp.csr_matrix(np.array([[0.0, 1.0, 3.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    transition_t, dangling = transition(weights)
    assert transition_t.toarray().tolist() == [[0.0, 0.0, 0.0], [0.25, 1.0, 0.0], [0.75, 0.0, 0.0]]
    assert dangling.tolist() == [False, False, True]
    a = np.array([[1.0, 0.0, -0.5], [-0.125, 0.5, 0.0], [-0.375, 0.0, 1.0]])
    exact = np.linalg.solve(a, [0.5, 0.0, 0.0])
    x = personalized_pagerank(Walk(transition_t, dangling), np.array([[1.0], [0.0], [0.0]]), 0.5, tol=1e-14)
    assert np.allclose(x[:, 0], exact, atol=1e-13)


def test_iterations_bound_the_l1_error():
    assert iterations_for(0.5, 1e-6) == 21  # 2 * 0.5**21 < 1e-6 <= 2 * 0.5**20
    assert iterations_for(0.85, 1e-6) == 90
    assert iterations_for(0.0, 1e-6) == 1


def test_damping_out_of_range_is_refused():
    walk = Walk(*transition(sp.csr_matrix(np.eye(2))))
    with pytest.raises(ValueError, match="damping=1.0"):
        personalized_pagerank(walk, np.array([[1.0], [0.0]]), 1.0)
