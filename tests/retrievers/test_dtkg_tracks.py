"""DTKG's two tracks on a hand-built KG: parallel fact checking (§3.3.1) and the chained path search (§3.3.2)."""

import hashlib

import numpy as np
import pytest
import scipy.sparse as sp

from glmrag.data.types import Question
from glmrag.index.kg import KGIndex
from glmrag.retrievers.dtkg import DTKGRetriever
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


def retriever(llm, **kw):
    kw = {"mode": "chain", "reranker": KeywordReranker("directed", "spouse", "born in"), "encoder": WordEncoder()} | kw
    return DTKGRetriever(llm, **kw)


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
    none, _ = run(retriever(scripted_llm(chain_reply()), threshold=0.8, denoise="none"))
    assert none.trace["layers"] == [] and none.triples == {}  # nothing over 0.8: the answer reads no paths


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


def test_parallel_falls_back_to_the_draft_as_one_fact(scripted_llm):
    llm = scripted_llm(parallel_reply("I cannot do that"))
    with llm.track("dtkg", "q2"):
        result, _ = run(retriever(llm, mode="parallel"), PARALLEL_QUESTION)
    assert result.trace["facts"] == [result.trace["draft"]]
    events = llm.usage.get("dtkg", "q2").events
    assert events["json_fallback"] == 1 and events["decompose_fallback"] == 1
