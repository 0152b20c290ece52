"""retriever=hipporag: HippoRAG's legacy retrieval, each point checked on a case where today's ``ppr`` differs.

References: igraph's ``personalized_pagerank`` (PRPACK, HippoRAG's solver) for the walk; hand computations of
HippoRAG's graph rules (``create_graph.py`` / ``hipporag.py``, branch legacy, commit b144c46) for the rest.
"""

import igraph as ig
import numpy as np
import pytest
import scipy.sparse as sp
from stand_ins import link_questions

from glmrag.data.types import Question
from glmrag.graph.pagerank import Walk, personalized_pagerank, transition, undirected_weights
from glmrag.index.kg import EntityLink, KGIndex
from glmrag.retrievers.base import Retriever
from glmrag.retrievers.hipporag import HippoRAGRetriever, ascii_alnum, hipporag_graph
from glmrag.retrievers.ppr import PPRRetriever


@pytest.mark.parametrize("seed", range(4))
def test_weighted_walk_matches_igraph_prpack(seed):
    rng = np.random.default_rng(seed)
    n, m = 60, 150
    src, dst = rng.integers(0, n - 5, m), rng.integers(0, n - 5, m)  # the last 5 nodes are isolated
    src[:6] = dst[:6]  # self-loops
    src[6:12], dst[6:12] = src[12:18], dst[12:18]  # parallel edges
    weight = rng.uniform(0.1, 3.0, m)
    walk = Walk(*transition(undirected_weights(src, dst, weight, n)))
    g = ig.Graph(n, list(zip(src.tolist(), dst.tolist(), strict=True)), directed=False)
    g.es["weight"] = weight.tolist()
    for seeds in (rng.choice(n - 5, 3, replace=False), [n - 1, 0]):  # the second restarts on an isolated node
        reset = np.zeros(n)
        reset[seeds] = rng.uniform(0.2, 1.0, len(seeds))
        expected = g.personalized_pagerank(
            damping=0.5, directed=False, weights="weight", reset=reset.tolist(), implementation="prpack"
        )
        ours = personalized_pagerank(walk, (reset / reset.sum())[:, None], 0.5, tol=1e-12)[:, 0]
        assert ours == pytest.approx(expected, abs=1e-10)


# Six phrases: 0 "alpha" 1 "beta" 2 "gamma" 3 "delta" 4 "beta2" 5 "ner only".
ENTITIES = ["alpha", "beta", "gamma", "delta", "beta2", "ner only"]
EMB = np.eye(6, dtype=np.float32)
EMB[4] = np.array([0, 0.9, 0, 0, np.sqrt(1 - 0.81), 0], dtype=np.float32)  # cos(beta, beta2) = 0.9
# triples: 0 alpha-r-beta, 1 alpha-s-beta, 2 beta-r-gamma, 3 gamma-r-gamma (self-loop), 4 gamma-r-delta,
# 5 beta2-r-delta, 6 beta-equivalent-beta2 (an index synonym row, stated by no passage)
TRIPLES = [[0, 0, 1], [0, 1, 1], [1, 0, 2], [2, 0, 2], [2, 0, 3], [4, 0, 3], [1, 2, 4]]
# passage x fact counts: p0 states fact 0 twice and fact 1; p1 facts 2, 3; p2 fact 4; p3 fact 5
FACTS = np.array(
    [[2, 1, 0, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1, 0]], dtype=np.float32
)
MENTIONS = {"q0": ["alpha", "alpha again"], "q1": ["gamma"], "q2": [], "q3": ["alpha", "alpha again", "gamma"]}


def _index() -> KGIndex:
    rows = {0: [0, 1], 1: [1, 2], 2: [2, 3], 3: [4, 3]}
    entity_passages = np.zeros((6, 4), dtype=np.float32)
    for p, ents in rows.items():
        entity_passages[ents, p] = 1.0
    entity_passages[5, 0] = 1.0  # an NER-only entity of p0 (no fact): glmrag's ppr counts it, HippoRAG does not
    return KGIndex(
        entities=list(ENTITIES),
        relations=["r", "s", "equivalent"],
        triples=np.array(TRIPLES),
        passage_ids=["p0", "p1", "p2", "p3"],
        entity_passages=sp.csr_matrix(entity_passages),
        entity_embeddings=EMB.copy(),
        question_links={"q0": [EntityLink("alpha", 0, 1.0)], "q1": [EntityLink("gamma", 2, 1.0)]},
        manifest={"embedder": "stand-in"},
        passage_facts=sp.csr_matrix(FACTS),
    )


class MentionEncoder:
    """Embeds a mention as the entity it names (``"alpha again"`` -> alpha's vector)."""

    def encode(self, texts):
        return np.stack([EMB[next(i for i, e in enumerate(ENTITIES) if t.startswith(e))] for t in texts])


def _retriever(**kwargs) -> HippoRAGRetriever:
    return HippoRAGRetriever(
        encoder=MentionEncoder(), mentions=lambda qs: [MENTIONS[q.id] for q in qs], tol=1e-13, **kwargs
    )


QUESTIONS = [Question(q, f"question {q}", ("a",), ()) for q in MENTIONS]


def _expected_weights() -> np.ndarray:
    """The undirected weights HippoRAG's code gives this graph, worked by hand."""
    w = np.zeros((6, 6))
    # alpha-beta: fact 0 stated twice + fact 1 once = 3 occurrences under both keys -> 6
    w[0, 1] = w[1, 0] = 6
    # beta-gamma: one occurrence under both keys -> 2
    w[1, 2] = w[2, 1] = 2
    w[2, 3] = w[3, 2] = 2  # gamma-delta; gamma's self-loop is dropped
    # beta2-delta: one occurrence -> 2 (beta2 has a synonym with beta, not with delta)
    w[4, 3] = w[3, 4] = 2
    # beta <-> beta2: cosine 0.9 assigned to both directed keys -> 1.8 (the index's own synonym row is not read)
    w[1, 4] = w[4, 1] = 1.8
    return w


def test_graph_weights_nodes_and_specificity_by_hand():
    graph = hipporag_graph(_index())
    transition_t, dangling = transition(sp.csr_matrix(_expected_weights()))
    assert np.allclose(graph.walk.transition_t.toarray(), transition_t.toarray())
    assert graph.nodes.tolist() == [0, 1, 2, 3, 4]  # "ner only" is no node
    # passages with a fact on the phrase: alpha 1, beta 2 (p0, p1), gamma 2, delta 2, beta2 1, ner-only 0 -> 1
    assert graph.specificity.tolist() == pytest.approx([1, 1 / 2, 1 / 2, 1 / 2, 1, 1])
    # p1 has facts beta-gamma and gamma-gamma: gamma counts twice (once per fact), beta once
    assert graph.passage_phrases.toarray()[1].tolist() == [0, 1, 2, 0, 0, 0]
    assert graph.passage_phrases.toarray()[0].tolist() == [2, 2, 0, 0, 0, 0]  # two distinct facts, not three


def test_a_synonym_replaces_the_fact_count_on_its_key():
    index = _index()
    index.entity_embeddings[2] = EMB[1]  # gamma now equals beta: cosine 1 replaces the beta-gamma fact count
    weights = _expected_weights()
    weights[1, 2] = weights[2, 1] = 2.0  # 1.0 on each key, not 1 + 1 (fact) + 1 (synonym)
    weights[2, 4] = weights[4, 2] = 1.8  # gamma - beta2 too, by the same cosine as beta's
    expected, _ = transition(sp.csr_matrix(weights))
    assert np.allclose(hipporag_graph(index).walk.transition_t.toarray(), expected.toarray(), atol=1e-6)


def test_synonyms_need_three_ascii_letters_or_digits():
    assert ascii_alnum("pál") == 2 and ascii_alnum("a1b") == 3 and ascii_alnum("b2é") == 2
    index = _index()
    index.entities[4] = "b2é"  # 2 ASCII alphanumerics (< 3): no synonym key from it, beta's key stays
    weights = _expected_weights()
    weights[1, 4] = weights[4, 1] = 0.9  # one way only
    expected, _ = transition(sp.csr_matrix(weights))
    assert np.allclose(hipporag_graph(index).walk.transition_t.toarray(), expected.toarray(), atol=1e-6)


def test_passages_are_scored_by_fact_mass_and_min_max_normalised():
    index = _index()
    retriever = _retriever()
    rankings = retriever.retrieve(QUESTIONS, index, None, top_k=4)
    restart, empty = retriever.restart(QUESTIONS, index)
    # q0: "alpha" and "alpha again" both link alpha: one weight, not two
    assert restart[:, 0].tolist() == pytest.approx([1, 0, 0, 0, 0, 0]) and empty.tolist() == [False, False, True, False]
    # q3: alpha (specificity 1, linked twice) and gamma (1/2) -> 2/3 and 1/3; summing would give 0.8 and 0.2
    assert restart[:, 3].tolist() == pytest.approx([2 / 3, 0, 1 / 3, 0, 0, 0])
    walk = Walk(*transition(sp.csr_matrix(_expected_weights())))
    ppr = personalized_pagerank(walk, restart[:, :1], 0.5, tol=1e-13)[:, 0]
    fact_scores = np.array([2 * (ppr[0] + ppr[1]), ppr[1] + 2 * ppr[2], ppr[2] + ppr[3], ppr[4] + ppr[3]])
    normalised = (fact_scores - fact_scores.min()) / (fact_scores.max() - fact_scores.min())
    order = np.argsort(-normalised, kind="stable")
    assert rankings[0].passage_ids == [index.passage_ids[p] for p in order]
    # abs 1e-7: the synonym weight is a float32 cosine of the embeddings, the hand weight an exact 0.9
    assert rankings[0].passage_scores == pytest.approx(normalised[order].tolist(), abs=1e-7)
    # glmrag's ppr ranks by the binary entity map (with the NER-only entity) and keeps the self-loop
    ppr_ranking = PPRRetriever(tol=1e-13, dtype="float64").retrieve(QUESTIONS[:1], index, None, top_k=4)[0]
    assert ppr_ranking.passage_scores != pytest.approx(rankings[0].passage_scores)
    assert isinstance(retriever, Retriever) and retriever.name == "hipporag"


def test_a_question_without_a_linked_node_gets_uniform_scores_not_global_pagerank():
    retriever = _retriever()
    ranking = retriever.retrieve(QUESTIONS, _index(), None, top_k=4)[2]
    assert retriever.fallbacks == 1  # q2 of the four
    assert ranking.passage_ids == ["p0", "p1", "p2", "p3"] and ranking.passage_scores == [0.25] * 4
    ppr = PPRRetriever(tol=1e-13, dtype="float64")
    index = _index()
    link_questions(index, [[]])  # ppr's fallback: global PageRank, which is not uniform here
    assert len(set(ppr.retrieve([Question("q0", "x", ("a",), ())], index, None, top_k=4)[0].passage_scores)) > 1


def test_mentions_link_to_fact_phrases_only():
    index = _index()
    retriever = HippoRAGRetriever(encoder=MentionEncoder(), mentions=lambda qs: [["ner only"] for _ in qs], tol=1e-13)
    restart, _ = retriever.restart(QUESTIONS[:1], index)
    # "ner only" is orthogonal to every node: argmax over the nodes picks the first (alpha), never entity 5
    assert restart[5, 0] == 0.0 and restart[:, 0].sum() == pytest.approx(1.0)


def test_settings_change_the_ranking():
    index = _index()
    base = _retriever().retrieve(QUESTIONS[1:2], index, None, top_k=4)[0]
    damped = _retriever(damping=0.9).retrieve(QUESTIONS[1:2], index, None, top_k=4)[0]
    no_synonyms = _retriever(max_synonyms=0).retrieve(QUESTIONS[1:2], index, None, top_k=4)[0]
    strict = _retriever(synonym_threshold=0.95).retrieve(QUESTIONS[1:2], index, None, top_k=4)[0]
    assert damped.passage_scores != pytest.approx(base.passage_scores)
    assert no_synonyms.passage_scores != pytest.approx(base.passage_scores)
    assert strict.passage_scores == pytest.approx(no_synonyms.passage_scores)  # 0.9 < 0.95: no synonym edge


def test_an_index_without_passage_facts_is_refused():
    index = _index()
    index.passage_facts = None
    with pytest.raises(ValueError, match="passage_facts=no"):
        hipporag_graph(index)
