"""DTKG's two tracks on a hand-built KG: parallel fact checking (§3.3.1) and the chained path search (§3.3.2)."""

import hashlib

import numpy as np
import pytest
import scipy.sparse as sp

from glmrag.data.types import Question
from glmrag.index.kg import KGIndex
from glmrag.retrievers.dtkg import DTKGRetriever, DTKGSettings
from glmrag.retrievers.dtkg.chain import path_score
from glmrag.retrievers.dtkg.evidence import triple_text
from glmrag.retrievers.dtkg.scoring import fuse

ENTITIES = [
    "inception",  # 0
    "christopher nolan",  # 1
    "emma thomas",  # 2
    "london",  # 3
    "1970",  # 4
    "q25188",  # 5
    "hans zimmer",  # 6
    "leonardo dicaprio",  # 7
    "frankfurt",  # 8
]
RELATIONS = ["directed by", "spouse of", "born in", "has id", "music by", "starring", "born on"]
TRIPLES = [
    (0, 0, 1),  # 0 inception directed by christopher nolan
    (1, 1, 2),  # 1 christopher nolan spouse of emma thomas
    (2, 2, 3),  # 2 emma thomas born in london
    (0, 3, 5),  # 3 inception has id q25188
    (0, 4, 6),  # 4 inception music by hans zimmer
    (0, 5, 7),  # 5 inception starring leonardo dicaprio
    (1, 6, 4),  # 6 christopher nolan born on 1970
    (6, 2, 8),  # 7 hans zimmer born in frankfurt
]
PASSAGES = [[0, 1], [1, 2], [2, 3], [0, 6], [7], [1, 4], [0, 5], [6, 8]]


def make_index() -> KGIndex:
    rows = [e for ents in PASSAGES for e in ents]
    cols = [j for j, ents in enumerate(PASSAGES) for _ in ents]
    return KGIndex(
        entities=list(ENTITIES),
        relations=list(RELATIONS),
        triples=np.asarray(TRIPLES),
        passage_ids=[f"p{j}" for j in range(len(PASSAGES))],
        entity_passages=sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(ENTITIES), len(PASSAGES))),
    )


class WordEncoder:
    """Hashed bag of words, unit rows: the cosine grows with shared words; no model to load."""

    def encode(self, texts):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace("?", " ").split():
                out[i, int.from_bytes(hashlib.sha256(w.encode()).digest()[:2], "little") % 64] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


class KeywordReranker:
    """1 for a candidate with a keyword of the query's wanted relations, else 0."""

    def __init__(self, *keywords: str) -> None:
        self.keywords = keywords

    def score(self, query, candidates):
        return np.asarray([float(any(k in c for k in self.keywords)) for c in candidates])


QUESTION = Question("q1", "Where was the spouse of the director of Inception born?", ("London",), ())


def chain_reply(sufficient_when: str | None = None, select: str = "[1]"):
    def reply(p: str) -> str:
        if "main entity" in p:
            return "Inception"
        if "enough to answer" in p:
            return "yes" if sufficient_when is not None and sufficient_when in p else "no"
        if "Which facts" in p:
            return select
        if "How necessary" in p:
            return "9"
        if "answer with a short phrase" in p:
            return "London"
        raise AssertionError(p)

    return reply


def retriever(llm, reranker=None, **settings):
    """A chained-track retriever (unless ``settings`` say otherwise) with keyword reranking and word embeddings."""
    reranker = reranker or KeywordReranker("directed", "spouse", "born in")
    settings = DTKGSettings(**({"mode": "chain"} | settings))
    return DTKGRetriever(llm, settings, reranker=reranker, encoder=WordEncoder())


def run(r, question=QUESTION):
    index = make_index()
    return r.answer(question, index), index


def test_chain_follows_the_scored_relations_and_scores_paths_by_product(scripted_llm):
    llm = scripted_llm(chain_reply())
    r = retriever(llm, max_width=1)
    result, index = run(r)
    assert result.track == "chain" and result.answer == "London" and result.trace["central"] == 0
    (path,) = result.trace["paths"]
    assert path.triples == (0, 1, 2) and path.entities == (0, 1, 2, 3)
    q = QUESTION.question
    texts = [triple_text(index, t) for t in path.triples]
    cos = r.tracks["chain"].scorer.cosine(q, texts)
    relation = fuse(np.ones(3), cos, 0.75)  # each chosen relation has reranker score 1
    assert path.score == pytest.approx(path_score(relation)) == pytest.approx(np.prod(relation))
    assert [p.score for p in result.trace["layers"][1]] == pytest.approx([np.prod(relation[:2])])
    assert result.triples == pytest.approx({0: path.score, 1: path.score, 2: path.score})
    assert result.trace["checks"] == 2  # after layers 1 and 2, not after the last one


def test_depth_and_width_limits(scripted_llm):
    r = retriever(scripted_llm(chain_reply()), max_depth=2, max_width=2, threshold=0.0)
    result, _ = run(r)
    assert len(result.trace["layers"]) == 2 and result.trace["checks"] == 1
    assert all(len(layer) <= 2 for layer in result.trace["layers"])
    assert all(len(p.triples) <= 2 for layer in result.trace["layers"] for p in layer)
    wide, _ = run(retriever(scripted_llm(chain_reply()), max_width=3, threshold=0.0, select_trigger=50))
    assert [len(layer) for layer in wide.trace["layers"]][0] == 3


def test_threshold_prunes_weak_relations(scripted_llm):
    result, index = run(retriever(scripted_llm(chain_reply()), max_width=3, threshold=0.5))
    rows = {t for layer in result.trace["layers"] for p in layer for t in p.triples}
    assert rows == {0, 1, 2}  # the reranker's zeros leave 0.25 * cosine < 0.5
    generic, _ = run(retriever(scripted_llm(chain_reply()), threshold=0.8, denoise="generic"))
    assert generic.trace["layers"] == [] and generic.triples == {}  # nothing over 0.8: the answer reads no paths
    # Table 4's "w/o Denoise" is "without any filtering": θ is off too, so the same case keeps its paths
    none, _ = run(retriever(scripted_llm(chain_reply()), threshold=0.8, denoise="none"))
    assert none.trace["layers"] and {t for p in none.trace["paths"] for t in p.triples} == {0, 1, 2}
    assert all(layer["screened"] == layer["scored"] for layer in none.trace["triples"])


class TableReranker:
    """A fixed reranker score per triple text (0 for any other)."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores

    def score(self, query, candidates):
        return np.asarray([self.scores.get(c, 0.0) for c in candidates])


def test_chain_pool_is_ordered_by_the_eq12_path_score(scripted_llm):
    index = make_index()
    rr = {0: 0.5, 4: 0.9, 7: 0.3, 1: 0.4, 6: 0.55}  # triple row -> reranker score (= relation score, rerank only)
    reranker = TableReranker({triple_text(index, row): v for row, v in rr.items()})
    r = retriever(
        scripted_llm(chain_reply()), reranker=reranker, scoring="rerank", denoise="none", max_depth=2, max_width=2
    )
    result, _ = run(r)
    layer1, layer2 = result.trace["layers"]
    assert {p.triples[-1] for p in layer1} == {4, 0}
    # path scores: 0.9 * 0.3 = .27 (via zimmer), 0.5 * 0.55 = .275 and 0.5 * 0.4 = .2 (via nolan);
    # by relation score alone the two best would be 6 (.55) and 1 (.4)
    assert [p.triples for p in layer2] == [(0, 6), (4, 7)]
    assert [p.score for p in layer2] == pytest.approx([0.5 * 0.55, 0.9 * 0.3])


@pytest.mark.parametrize(("scoring", "threshold"), [("hybrid", 0.5), ("cosine", 0.0), ("random", 0.0)])
def test_llm_selection_does_not_depend_on_the_scoring_mode(scripted_llm, scoring, threshold):
    # Inception has 4 candidate relations: "excessive" over 3 whatever the scores; under hybrid scoring only
    # "directed by" passes θ = 0.5, so a trigger on the scored pool would never select there
    llm = scripted_llm(chain_reply(select="[1]"))
    kw = {"reranker": KeywordReranker("directed"), "scoring": scoring, "threshold": threshold, "max_depth": 1}
    result, _ = run(retriever(llm, **kw, select_trigger=3))
    assert result.trace["triples"][0]["candidates"] == 4 and result.trace["triples"][0]["llm_selection"]
    assert sum("Which facts" in p for p in llm.prompts) >= 1
    quiet = scripted_llm(chain_reply(select="[1]"))
    run(retriever(quiet, **kw, select_trigger=10))
    assert not any("Which facts" in p for p in quiet.prompts)


def test_sufficiency_yes_stops_early(scripted_llm):
    llm = scripted_llm(chain_reply(sufficient_when="emma thomas"))
    result, _ = run(retriever(llm, max_width=1))
    assert len(result.trace["layers"]) == 2 and result.trace["checks"] == 2
    assert result.trace["paths"][0].triples == (0, 1)
    assert sum("enough to answer" in p for p in llm.prompts) == 2


def test_llm_selection_when_the_pool_is_excessive(scripted_llm):
    llm = scripted_llm(chain_reply(select="[2]"))
    r = retriever(llm, reranker=KeywordReranker("inception"), threshold=0.0, select_trigger=2, max_depth=1)
    result, index = run(r)
    (select_prompt,) = [p for p in llm.prompts if "Which facts" in p]
    second = select_prompt.split("\n2. ")[1].split("\n")[0]
    assert [triple_text(index, t) for t in result.trace["paths"][0].triples] == [second]
    garbled = scripted_llm(chain_reply(select="the best ones"))
    with garbled.track("dtkg", "q1"):
        result, _ = run(retriever(garbled, reranker=KeywordReranker("inception"), threshold=0.0, select_trigger=2))
    assert len(result.trace["layers"][0]) == 3  # fell back to the width rule
    assert garbled.usage.get("dtkg", "q1").events["select_fallback"] >= 1


def test_task_aware_denoising_drops_administrative_and_unnecessary_relations(scripted_llm):
    def reply(p):
        if "How necessary" in p:
            return "1" if "starring" in p else "9"
        return chain_reply()(p)

    kw = {"reranker": KeywordReranker("inception"), "threshold": 0.0, "max_depth": 1, "max_width": 4}
    full, _ = run(retriever(scripted_llm(reply), **kw, select_trigger=50))
    assert {p.triples[0] for p in full.trace["layers"][0]} == {0, 4}  # has id: Eq. 15; starring: Eq. 16
    none, _ = run(retriever(scripted_llm(reply), **kw, select_trigger=50, denoise="none"))
    assert {p.triples[0] for p in none.trace["layers"][0]} == {0, 3, 4, 5}


PARALLEL_QUESTION = Question("q2", "Who directed Inception and who wrote its music?", ("Christopher Nolan",), ())


def parallel_reply(decomposition: str):
    def reply(p: str) -> str:
        if "one short sentence" in p:
            return "Inception was directed by Steven Spielberg, with music by Hans Zimmer."
        if "atomic facts" in p:
            return decomposition
        if "subject entity" in p:
            return "Inception"
        if "support the statement" in p:
            return "No." if "Spielberg" in p.split("Statement:")[1] else "Yes"
        if "Rewrite the statement" in p:
            return "Inception was directed by Christopher Nolan."
        if "How necessary" in p:
            return "7"
        if "answer with a short phrase" in p:
            return "Christopher Nolan and Hans Zimmer"
        raise AssertionError(p)

    return reply


FACTS = '["Inception was directed by Steven Spielberg.", "Inception has music by Hans Zimmer."]'


def test_parallel_verifies_and_rewrites_facts(scripted_llm):
    llm = scripted_llm(parallel_reply(FACTS))
    r = retriever(llm, mode="parallel", reranker=KeywordReranker("directed", "music"), verify_top=2)
    result, index = run(r, PARALLEL_QUESTION)
    t = result.trace
    assert result.track == "parallel" and result.answer == "Christopher Nolan and Hans Zimmer"
    assert t["facts"] == ["Inception was directed by Steven Spielberg.", "Inception has music by Hans Zimmer."]
    assert t["entities"] == [0, 0] and t["supported"] == [False, True]
    assert t["final_facts"] == ["Inception was directed by Christopher Nolan.", t["facts"][1]]
    assert t["evidence"][0][0][0] == 0 and t["evidence"][1][0][0] == 4  # each fact's best triple
    rows = [row for group in t["evidence"] for row, _ in group]
    assert len(rows) == len(set(rows)) and 3 not in rows  # cross-redundancy; "has id" (Eq. 15)
    assert all(len(group) <= 2 for group in t["evidence"])
    assert set(result.triples) == set(rows)
    assert sum("support the statement" in p for p in llm.prompts) == 2
    assert sum("Rewrite the statement" in p for p in llm.prompts) == 1


def test_parallel_drops_unnecessary_triples_by_eq16_only_when_task_aware(scripted_llm):
    def reply(p: str) -> str:
        if "How necessary" in p:
            return "2" if "hans zimmer" in p else "8"
        return parallel_reply(FACTS)(p)

    kw = {"mode": "parallel", "reranker": KeywordReranker("directed", "music"), "verify_top": 2, "threshold": 0.0}
    full, index = run(retriever(scripted_llm(reply), **kw), PARALLEL_QUESTION)
    rows = {row for group in full.trace["evidence"] for row, _ in group}
    assert 4 not in rows and 0 in rows  # "inception music by hans zimmer": necessity 0.2 < 0.5 (Eq. 16)
    generic, _ = run(retriever(scripted_llm(reply), **kw, denoise="generic"), PARALLEL_QUESTION)
    assert 4 in {row for group in generic.trace["evidence"] for row, _ in group}
    assert full.trace["triples"]["necessary"] != generic.trace["triples"]["necessary"]


def test_parallel_generic_threshold_and_none_differ(scripted_llm):
    kw = {"mode": "parallel", "reranker": KeywordReranker("directed"), "verify_top": 3}
    generic, _ = run(retriever(scripted_llm(parallel_reply(FACTS)), **kw, denoise="generic"), PARALLEL_QUESTION)
    none, _ = run(retriever(scripted_llm(parallel_reply(FACTS)), **kw, denoise="none"), PARALLEL_QUESTION)
    # θ = 0.5: only the reranked "directed by" triple passes; with no denoising every fact keeps its top 3
    assert [len(g) for g in generic.trace["evidence"]] == [1, 1]  # both facts: "directed by"
    assert [len(g) for g in none.trace["evidence"]] == [3, 3]
    assert 3 in {row for g in none.trace["evidence"] for row, _ in g}  # "has id" survives without Eq. 15


def test_unlinked_subjects_are_counted_and_get_no_triples(scripted_llm):
    def reply(p: str) -> str:
        return "zzzz qqq" if "subject entity" in p else parallel_reply(FACTS)(p)

    llm = scripted_llm(reply)
    with llm.track("dtkg", "q2"):
        result, _ = run(retriever(llm, mode="parallel"), PARALLEL_QUESTION)
    assert result.trace["entities"] == [None, None] and result.triples == {}
    assert [link["linked"] for link in result.trace["links"]] == [False, False]
    assert all(link["similarity"] < 0.5 for link in result.trace["links"])
    assert llm.usage.get("dtkg", "q2").events["unlinked_mention"] == 2


def test_parallel_falls_back_to_the_draft_as_one_fact(scripted_llm):
    llm = scripted_llm(parallel_reply("I cannot do that"))
    with llm.track("dtkg", "q2"):
        result, _ = run(retriever(llm, mode="parallel"), PARALLEL_QUESTION)
    assert result.trace["facts"] == [result.trace["draft"]]
    events = llm.usage.get("dtkg", "q2").events
    assert events["json_fallback"] == 1 and events["decompose_fallback"] == 1
