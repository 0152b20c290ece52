"""retriever=hipporag2: HippoRAG 2 without its LLM filter, each rule of its code worked by hand on a tiny index.

References: hand computations of HippoRAG 2's rules (OSU-NLP-Group/HippoRAG main, c617143,
``src/hipporag/HippoRAG.py``) for the graph and the seeds; igraph's ``personalized_pagerank`` (PRPACK,
undirected, weighted: the call of HippoRAG 2's ``run_ppr``) for the walk.
"""

from pathlib import Path

import igraph as ig
import numpy as np
import pytest
import scipy.sparse as sp

from glmrag.data.types import Corpus, Passage, Question
from glmrag.graph.pagerank import transition
from glmrag.index.kg import KGIndex
from glmrag.retrievers.base import Retriever
from glmrag.retrievers.hipporag2 import HippoRAG2Retriever, hipporag2_graph

ROOT = Path(__file__).resolve().parents[2]

# Phrases 0 alpha 1 beta 2 gamma 3 delta 4 beta2; graph nodes 5..8 are the passages p0..p3.
ENTITIES = ["alpha", "beta", "gamma", "delta", "beta2"]
EMB = np.eye(5, dtype=np.float32)
EMB[4] = np.array([0, 0.9, 0, 0, np.sqrt(1 - 0.81)], dtype=np.float32)  # cos(beta, beta2) = 0.9 >= 0.8
RELATIONS = ["born in", "part of", "equivalent"]
# triples: 0 alpha-born in-beta, 1 beta-part of-gamma, 2 gamma-born in-delta, 3 beta2-part of-delta,
# 4 beta-equivalent-beta2 (an index synonym row, stated by no passage: not a fact)
TRIPLES = [[0, 0, 1], [1, 1, 2], [2, 0, 3], [4, 1, 3], [1, 2, 4]]
# passage x fact counts: p0 states fact 0 twice; p1 fact 1; p2 facts 1 and 2; p3 fact 3
FACTS = np.array([[2, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 1, 0]], dtype=np.float32)
FACT_TEXTS = [
    "('alpha', 'born in', 'beta')",
    "('beta', 'part of', 'gamma')",
    "('gamma', 'born in', 'delta')",
    "('beta2', 'part of', 'delta')",
]
PASSAGES = [Passage(f"p{i}", f"P{i}", f"text {i}") for i in range(4)]
# Stand-in embeddings in 3-d: facts and passages on the same four directions, two questions.
DIRECTIONS = [(1, 0, 0), (0, 1, 0), (0, 0, 1), (0.6, 0.8, 0)]
VECTORS = {
    **{t: np.array(v, dtype=float) for t, v in zip(FACT_TEXTS, DIRECTIONS, strict=True)},
    **{f"P{i}\ntext {i}": np.array(v, dtype=float) for i, v in enumerate(DIRECTIONS)},
    "q0": np.array([0.8, 0.6, 0.0]),
    "q1": np.array([0.0, 0.6, 0.8]),
}
QUESTIONS = [Question(q, q, ("a",), ()) for q in ("q0", "q1")]


class TableEncoder:
    """Embeds each known text as its row of :data:`VECTORS`; counts the texts it was asked for."""

    model_name = "stand-in"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def encode(self, texts, stage="embedding", unit="phrase"):
        self.calls += list(texts)
        return np.stack([VECTORS[t] for t in texts]) if texts else np.zeros((0, 3))


def _index(facts: np.ndarray = FACTS) -> KGIndex:
    entity_passages = np.zeros((5, 4), dtype=np.float32)
    for p, ents in {0: [0, 1], 1: [1, 2], 2: [1, 2, 3], 3: [3, 4]}.items():
        entity_passages[ents, p] = 1.0
    return KGIndex(
        entities=list(ENTITIES),
        relations=list(RELATIONS),
        triples=np.array(TRIPLES),
        passage_ids=["p0", "p1", "p2", "p3"],
        entity_passages=sp.csr_matrix(entity_passages),
        entity_embeddings=EMB.copy(),
        manifest={"embedder": "stand-in"},
        passage_facts=sp.csr_matrix(facts),
    )


def _retriever(**kwargs) -> HippoRAG2Retriever:
    return HippoRAG2Retriever(encoder=TableEncoder(), tol=1e-13, **kwargs)


def _expected_weights() -> np.ndarray:
    """HippoRAG 2's undirected weights of this graph (the sum of a pair's node_to_node_stats keys), by hand."""
    w = np.zeros((9, 9))
    pairs = {
        (0, 1): 4.0,  # alpha-beta: fact 0 stated twice, under both keys: 2 + 2
        (1, 2): 4.0,  # beta-gamma: stated in p1 and in p2: 2 + 2
        (2, 3): 2.0,  # gamma-delta: once, both keys
        (4, 3): 2.0,  # beta2-delta: once, both keys
        (1, 4): 1.8,  # beta <-> beta2: the cosine 0.9 on each key (the index's synonym row is not read)
        # passage -> phrase: 1.0 on the one key (passage, phrase) for each head or tail of the passage's facts
        (5, 0): 1.0,
        (5, 1): 1.0,
        (6, 1): 1.0,
        (6, 2): 1.0,
        (7, 1): 1.0,
        (7, 2): 1.0,
        (7, 3): 1.0,
        (8, 4): 1.0,
        (8, 3): 1.0,
    }
    for (u, v), weight in pairs.items():
        w[u, v] = w[v, u] = weight
    return w


# q0 = (0.8, 0.6, 0): cosines with facts / passages 0.8, 0.6, 0, 0.96 -> min-max 5/6, 5/8, 0, 1.
Q0_FACT_SCORES = np.array([5 / 6, 5 / 8, 0.0, 1.0])
# Phrase seeds with all four facts: fact score / passages of the phrase, averaged over the phrase's facts:
# alpha 5/6 (f0, 1 passage); beta (5/6 / 3 + 5/8 / 3) / 2 = 35/144 (f0, f1; 3 passages); gamma (5/8 / 2 + 0) / 2
# = 5/32 (f1, f2; 2 passages); delta (1 / 2 + 0) / 2 = 1/4 (f3, f2; 2 passages); beta2 1 (f3, 1 passage).
Q0_PHRASES = np.array([5 / 6, 35 / 144, 5 / 32, 1 / 4, 1.0])
Q0_PASSAGES = 0.05 * Q0_FACT_SCORES  # same directions: min-max dense scores x passage_node_weight


def _igraph_ppr(reset: np.ndarray, damping: float = 0.5) -> np.ndarray:
    """HippoRAG 2's run_ppr on the hand-weighted graph: igraph, undirected, weighted, PRPACK."""
    w = _expected_weights()
    u, v = np.nonzero(np.triu(w))
    g = ig.Graph(9, list(zip(u.tolist(), v.tolist(), strict=True)), directed=False)
    g.es["weight"] = w[u, v].tolist()
    scores = g.personalized_pagerank(
        damping=damping, directed=False, weights="weight", reset=reset.tolist(), implementation="prpack"
    )
    return np.array(scores)


def test_graph_weights_facts_and_passage_counts_by_hand():
    graph = hipporag2_graph(_index())
    expected, dangling = transition(sp.csr_matrix(_expected_weights()))
    assert np.allclose(graph.walk.transition_t.toarray(), expected.toarray(), atol=1e-6)
    assert not graph.walk.dangling.any()
    assert graph.facts.tolist() == [0, 1, 2, 3]  # the synonym row 4 is stated by no passage
    assert graph.fact_texts == FACT_TEXTS  # str() of the (head, relation, tail) tuple
    # passages with a fact on the phrase: alpha {p0}, beta {p0, p1, p2}, gamma {p1, p2}, delta {p2, p3}, beta2 {p3}
    assert graph.passage_count.tolist() == [1, 3, 2, 2, 1]


def test_seeds_fact_scores_to_mean_phrase_weights_and_passage_weights():
    index, retriever = _index(), _retriever()
    passages = retriever.passage_embeddings(index, Corpus(PASSAGES))
    restart = retriever.restart(np.stack([VECTORS["q0"]]), index, passages)[:, 0]
    assert restart.tolist() == pytest.approx([*Q0_PHRASES, *Q0_PASSAGES])
    # linking_top_k=2: facts f3 (1) and f0 (5/6); phrases beta2 1, alpha 5/6, delta 1/2, beta 5/18 -> the best two
    top2 = _retriever(linking_top_k=2).restart(np.stack([VECTORS["q0"]]), index, passages)[:, 0]
    assert top2.tolist() == pytest.approx([5 / 6, 0, 0, 0, 1, *Q0_PASSAGES])


def test_passages_rank_by_their_node_ppr_as_igraph_computes_it():
    index, retriever = _index(), _retriever()
    rankings = retriever.retrieve(QUESTIONS, index, Corpus(PASSAGES), top_k=4)
    reset = np.r_[Q0_PHRASES, Q0_PASSAGES]
    expected = _igraph_ppr(reset / reset.sum())[5:]
    order = np.argsort(-expected, kind="stable")
    assert rankings[0].passage_ids == [f"p{p}" for p in order]
    # abs 1e-7: the synonym weight is a float32 cosine of the embeddings, the hand weight an exact 0.9
    assert rankings[0].passage_scores == pytest.approx(expected[order].tolist(), abs=1e-7)
    # q1 = (0, 0.6, 0.8): fact cosines 0, 0.6, 0.8, 0.48 -> 0, 3/4, 1, 3/5; alpha is in no kept fact but f0
    # (score 0): alpha 0; beta (0 + 3/4 / 3) / 2 = 1/8; gamma (3/4 / 2 + 1 / 2) / 2 = 7/16;
    # delta (1 / 2 + 3/5 / 2) / 2 = 2/5; beta2 3/5. Top 5 of 5 phrases: all kept.
    reset = np.r_[[0, 1 / 8, 7 / 16, 2 / 5, 3 / 5], 0.05 * np.array([0, 3 / 4, 1, 3 / 5])]
    expected = _igraph_ppr(reset / reset.sum())[5:]
    order = np.argsort(-expected, kind="stable")
    assert rankings[1].passage_ids == [f"p{p}" for p in order]
    assert rankings[1].passage_scores == pytest.approx(expected[order].tolist(), abs=1e-7)
    assert rankings[0].entity_ids is not None and len(rankings[0].entity_ids) == 5
    assert isinstance(retriever, Retriever) and retriever.name == "hipporag2" and retriever.fallbacks == 0


def test_without_any_fact_passages_rank_by_min_max_dense_scores():
    retriever = _retriever()
    ranking = retriever.retrieve(QUESTIONS[:1], _index(np.zeros_like(FACTS)), Corpus(PASSAGES), top_k=4)[0]
    assert retriever.fallbacks == 1
    # dense cosines 0.8, 0.6, 0, 0.96 -> min-max 5/6, 5/8, 0, 1
    assert ranking.passage_ids == ["p3", "p0", "p1", "p2"]
    assert ranking.passage_scores == pytest.approx([1, 5 / 6, 5 / 8, 0])


def test_each_setting_changes_the_ranking():
    index, corpus = _index(), Corpus(PASSAGES)
    base = _retriever().retrieve(QUESTIONS[:1], index, corpus, top_k=4)[0].passage_scores
    for setting in (
        {"linking_top_k": 2},
        {"passage_node_weight": 0.5},
        {"damping": 0.8},
        {"synonym_threshold": 0.95},
        {"max_synonyms": 0},
    ):
        changed = _retriever(**setting).retrieve(QUESTIONS[:1], index, corpus, top_k=4)[0].passage_scores
        assert changed != pytest.approx(base, abs=1e-6), setting
    loose = HippoRAG2Retriever(encoder=TableEncoder(), tol=0.5).retrieve(QUESTIONS[:1], index, corpus, top_k=4)
    assert loose[0].passage_scores != pytest.approx(base, abs=1e-6)  # one power iteration instead of ~43
    strict = _retriever(synonym_threshold=0.95).retrieve(QUESTIONS[:1], index, corpus, top_k=4)[0]
    no_synonyms = _retriever(max_synonyms=0).retrieve(QUESTIONS[:1], index, corpus, top_k=4)[0]
    assert strict.passage_scores == pytest.approx(no_synonyms.passage_scores)  # 0.9 < 0.95: no synonym edge


def test_passage_embeddings_are_cached_under_cache_dir(tmp_path):
    index, corpus = _index(), Corpus(PASSAGES)
    first = HippoRAG2Retriever(encoder=TableEncoder(), cache_dir=tmp_path)
    first.retrieve(QUESTIONS[:1], index, corpus, top_k=4)
    assert len(list(tmp_path.glob("dense-*.cache"))) == 1
    second = HippoRAG2Retriever(encoder=TableEncoder(), cache_dir=tmp_path)
    second.retrieve(QUESTIONS[:1], index, corpus, top_k=4)
    assert not any(t.startswith("P") for t in second.encoder.calls)  # passages read from the cache file


def test_the_embedder_is_the_index_s_unless_named():
    assert HippoRAG2Retriever()._encoder(_index()).model_name == "stand-in"
    assert HippoRAG2Retriever(embed_model="other")._encoder(_index()).model_name == "other"


def test_fact_embeddings_go_through_the_phrase_cache_when_named(tmp_path):
    assert HippoRAG2Retriever()._encoder(_index()).cache_dir is None
    cached = HippoRAG2Retriever(fact_cache_dir=tmp_path)._encoder(_index())
    assert cached.phrase_cache.folder.parent == tmp_path


def test_an_index_without_passage_facts_is_refused():
    index = _index()
    index.passage_facts = None
    with pytest.raises(ValueError, match="passage_facts=no"):
        hipporag2_graph(index)


def test_the_yaml_node_instantiates_with_the_code_defaults(tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)

    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=["retriever=[hipporag2]", "output_dir=unused"])
    retriever = instantiate(cfg.retriever.hipporag2, encoder=TableEncoder())
    assert isinstance(retriever, HippoRAG2Retriever)
    assert (retriever.linking_top_k, retriever.passage_node_weight, retriever.damping) == (5, 0.05, 0.5)
    assert (retriever.synonym_threshold, retriever.max_synonyms, retriever.tol) == (0.8, 101, 1e-10)
    assert retriever.embed_model is None and retriever.cache_dir == tmp_path / "embeddings"
    assert retriever.fact_cache_dir == tmp_path / "phrase_embeddings"
