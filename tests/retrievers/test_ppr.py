import networkx as nx
import numpy as np
import pytest
from stand_ins import link_questions

from glmrag.graph.pagerank import HIPPORAG_DAMPING, iterations_for, personalized_pagerank
from glmrag.retrievers.base import Retriever
from glmrag.retrievers.ppr import PPRRetriever, random_walk


def _graph(index):
    g = nx.MultiGraph()
    g.add_nodes_from(range(index.num_entities))  # isolated entities are dangling nodes
    g.add_edges_from((int(h), int(t)) for h, _, t in index.triples)
    return g


def _questions(index, seed_sets):
    return link_questions(index, seed_sets)


def _exact():
    return PPRRetriever(tol=1e-13, dtype="float64")


@pytest.mark.parametrize("graph_seed", range(3))
def test_matches_networkx_pagerank(random_graph, graph_seed):
    index = random_graph(120, 200, seed=graph_seed)  # hubs, parallel triples, self-loops, isolated entities
    walk = random_walk(index)
    assert walk.dangling.any() and (index.triples[:, 0] == index.triples[:, 2]).any()
    rng = np.random.default_rng(graph_seed)
    seed_sets = [rng.choice(index.num_entities, rng.integers(1, 5), replace=False).tolist() for _ in range(6)]
    seed_sets.append([int(np.flatnonzero(walk.dangling)[0])])  # restart on an isolated entity
    questions = _questions(index, seed_sets)
    scores = _exact().entity_scores(questions, index)  # (B, E)
    g = _graph(index)
    count = index.entity_passage_count
    for b, seeds in enumerate(seed_sets):
        personalization = {s: 1.0 / max(count[s], 1.0) for s in seeds}  # node specificity
        reference = nx.pagerank(g, alpha=0.5, personalization=personalization, tol=1e-14, max_iter=1000)
        assert np.allclose(scores[b], [reference[v] for v in range(index.num_entities)], atol=1e-9)
        assert scores[b].sum() == pytest.approx(1.0)


def test_question_without_entities_gets_global_pagerank(random_graph):
    index = random_graph(120, 200, seed=5)
    retriever = _exact()
    questions = _questions(index, [[3, 4], []])
    rankings = retriever.retrieve(questions, index, None, top_k=5)
    assert retriever.fallbacks == 1
    reference = nx.pagerank(_graph(index), alpha=0.5, tol=1e-14, max_iter=1000)
    ppr = np.array([reference[v] for v in range(index.num_entities)])
    passage = index.entity_passages.T @ ppr
    expected = sorted(range(index.num_passages), key=lambda p: (-passage[p], p))[:5]
    assert rankings[1].passage_ids == [index.passage_ids[p] for p in expected]
    assert rankings[1].passage_scores == pytest.approx(passage[expected].tolist())


def test_retrieve_ranks_passages_by_entity_mass(kg):
    # 0 - 1 - 2 - 3 and an isolated 4; passages: p0 {0}, p1 {2}, p2 {3}, p3 {4}, p4 {1, 2}
    index = kg([(0, 0, 1), (1, 0, 2), (2, 0, 3)], num_entities=5, passages=[[0], [2], [3], [4], [1, 2]])
    retriever = _exact()
    (ranking,) = retriever.retrieve(_questions(index, [[0]]), index, None, top_k=5)
    ppr = retriever.entity_scores(_questions(index, [[0]]), index)[0]
    expected = {"p0": ppr[0], "p1": ppr[2], "p2": ppr[3], "p3": 0.0, "p4": ppr[1] + ppr[2]}
    assert ranking.passage_ids == ["p0", "p4", "p1", "p2", "p3"]
    assert ranking.passage_scores == pytest.approx([expected[p] for p in ranking.passage_ids])
    assert ranking.entity_ids[:4] == [0, 1, 2, 3] and ranking.entity_scores[4] == 0.0
    assert ppr[0] == pytest.approx(ppr.max()) and ppr[4] == 0.0


def test_restart_weights_by_node_specificity(kg):
    # entity 0 is in 1 passage, entity 1 in 3: restart mass 3/4 and 1/4
    index = kg([(0, 0, 1)], num_entities=3, passages=[[0, 1], [1], [1, 2]])
    restart, empty = PPRRetriever().restart(_questions(index, [[0, 1], []]), index)
    assert restart[:, 0].tolist() == pytest.approx([0.75, 0.25, 0.0])
    assert restart[:, 1].tolist() == pytest.approx([1 / 3] * 3) and empty.tolist() == [False, True]


def test_batching_and_float32_agree(random_graph):
    index = random_graph(400, 900, seed=9)
    rng = np.random.default_rng(9)
    questions = _questions(index, [rng.choice(400, 2, replace=False).tolist() for _ in range(7)])
    exact = PPRRetriever(tol=1e-12, dtype="float64", batch_size=3)
    fast = PPRRetriever(batch_size=64)  # defaults: float32, tol 1e-6
    a = exact.retrieve(questions, index, None, top_k=8)
    b = fast.retrieve(questions, index, None, top_k=8)
    for x, y in zip(a, b, strict=True):
        assert x.passage_scores == pytest.approx(y.passage_scores, abs=2e-6)
    assert np.abs(exact.entity_scores(questions, index) - fast.entity_scores(questions, index)).sum(axis=1).max() < 2e-6
    assert isinstance(fast, Retriever) and fast.name == "ppr"


def test_iteration_count_bound():
    assert iterations_for(0.5, 1e-6) == 21  # 2 * 0.5**21 < 1e-6 <= 2 * 0.5**20
    assert iterations_for(0.85, 1e-6) == 90
    assert iterations_for(0.0, 1e-6) == 1  # no walk: the restart vector is the answer


def test_walk_is_cached_per_index(random_graph):
    a, b = random_graph(50, 80, seed=0), random_graph(50, 80, seed=1)
    retriever = PPRRetriever()
    assert retriever.prepare(a) is retriever.prepare(a)
    assert retriever.prepare(b) is not retriever.prepare(a)
    x = personalized_pagerank(retriever.prepare(a), np.full((50, 1), 1 / 50), HIPPORAG_DAMPING)
    assert x.shape == (50, 1) and x.sum() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("damping", [0.2, 0.85])
def test_the_retriever_walks_with_its_damping(random_graph, damping):
    # at 0.5 damping and 1 - damping coincide: only other values tell an edge-following probability from a restart one
    index = random_graph(120, 200, seed=7)
    questions = _questions(index, [[1, 2], [5]])
    scores = PPRRetriever(damping=damping, tol=1e-13, dtype="float64").entity_scores(questions, index)
    count = index.entity_passage_count
    for b, seeds in enumerate([[1, 2], [5]]):
        personalization = {s: 1.0 / max(count[s], 1.0) for s in seeds}
        reference = nx.pagerank(_graph(index), alpha=damping, personalization=personalization, tol=1e-14, max_iter=1000)
        assert np.allclose(scores[b], [reference[v] for v in range(index.num_entities)], atol=1e-9)


def test_ppr_config_uses_hipporags_damping(tmp_path, monkeypatch):
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from glmrag.jobs.evaluate import make_retrievers

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=["retriever=[ppr]", "output_dir=unused"])
    # HippoRAG (Gutiérrez et al., 2024), implementation details: damping factor 0.5
    assert make_retrievers(cfg.retriever)["ppr"].damping == 0.5
