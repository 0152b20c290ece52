"""Tables that say when the LLM decided nothing (issue 26): per LLM method the share of questions on which each
LLM decision fell back, "(= system)" on a row whose rankings repeat another's, and a warning under the table
when a decision fell back on more than half of its questions; in results.md, metrics.json and the study tables.
"""

import csv
import io
import json
import logging

import pytest
from stand_ins import HashEncoder

from glmrag.data.types import Corpus, Passage
from glmrag.eval import evaluate, format_markdown
from glmrag.eval.outputs import metrics_json
from glmrag.eval.store import StoredRun, run_record
from glmrag.eval.study_tables import format_study_markdown, runs_csv
from glmrag.eval.traces import add_traces, question_decisions, system_fallbacks
from glmrag.retrievers.base import Ranking
from glmrag.retrievers.dtkg import DTKGRetriever, DTKGSettings

# A chain question of the stored MuSiQue study (eval_musique100_dtkg_20q): the classifier's reply unreadable,
# the reranker's list unreadable, no path found, so no triple used.
CHAIN_TRACE = {
    "track": "chain",
    "why": "classifier fallback to chain: 'The answer to the'",
    "triples": [{"candidates": 7, "scored": 7, "screened": 0, "llm_selection": False, "chosen": 0, "necessary": 0}],
    "checks": 0,
    "fallbacks": {"label_fallback": 1, "json_fallback": 1, "rerank_fallback": 1, "no_path": 1},
    "used": {},
}
PARALLEL_TRACE = {
    "track": "parallel",
    "why": "fixed mode parallel",
    "triples": {
        "candidates": [3],
        "scored": [3],
        "screened": [1],
        "top_k_after_cross_redundancy": [1],
        "necessary": [1],
    },
    "supported": [True],
    "fallbacks": {"necessity_fallback": 1, "label_fallback": 1},
    "used": {"4": 0.5},
}


def steered_trace(first_scores, second_scores, rewrite="none"):
    return {
        "restart": [],
        "heads": [[0, 0]],
        "rounds": [
            {"read": [], "targets": [["a", first_scores[0]], ["b", first_scores[1]]], "rewrite": rewrite},
            {"read": [], "targets": [["a", second_scores[0]], ["b", second_scores[1]]], "rewrite": None},
        ],
    }


def test_decisions_made_and_fallen_back_are_read_from_a_dtkg_trace():
    # by hand: the classifier ran and fell back, the central entity and the reranker ran (7 scored), the reranker
    # fell back; no selection, necessity or sufficiency check ran (nothing passed θ); the answer came; no triple
    assert question_decisions(CHAIN_TRACE) == {
        "classifier": True,
        "central entity": False,
        "reranker": True,
        "answer": False,
        "no triples": True,
    }
    # every step of the chain ran (4 scored, an LLM selection, 2 chosen for Eq. 16, one sufficiency check) and
    # each reply was read: all made, none fell back
    decided = {
        "track": "chain",
        "why": "classifier: 'yes'",
        "triples": [{"candidates": 8, "scored": 8, "screened": 2, "llm_selection": True, "chosen": 2, "necessary": 1}],
        "checks": 1,
        "fallbacks": {},
        "used": {"0": 0.9},
    }
    made = ("classifier", "central entity", "reranker", "selection", "yes/no check", "necessity", "answer")
    assert question_decisions(decided) == dict.fromkeys(made, False) | {"no triples": False}
    # a fixed track asks no classifier; the label fallback is then a yes/no check's (Eq. 8 verification)
    assert question_decisions(PARALLEL_TRACE) == {
        "decomposition": False,
        "subject": False,
        "reranker": False,
        "yes/no check": True,
        "necessity": True,
        "answer": False,
        "no triples": False,
    }


def test_decisions_of_a_hyperaddress_trace():
    # round 2's reader points at nothing (every score 0); the rewrite was tried and did not fire
    assert question_decisions(steered_trace([0.3, 0.1], [0.0, 0.0])) == {"pointer": True, "rewrite": True}
    fired = {"before": "q", "after": "r", "span": "s", "entity": 1, "label": "l", "cosine": 0.8}
    assert question_decisions(steered_trace([0.3, 0.1], [0.2, 0.0], fired)) == {"pointer": False, "rewrite": False}
    assert question_decisions({"restart": []}) is None  # the walk only: no LLM decision


def test_shares_count_questions_where_the_decision_was_made_and_head_selection_misses():
    rows = [{"trace": CHAIN_TRACE}, {"trace": PARALLEL_TRACE}, {"question_id": "untraced"}]
    assert system_fallbacks(rows) == {
        "classifier": {"fell_back": 1, "of": 1, "unit": "questions"},  # asked once (the other track was fixed)
        "reranker": {"fell_back": 1, "of": 2, "unit": "questions"},
        "yes/no check": {"fell_back": 1, "of": 1, "unit": "questions"},
        "necessity": {"fell_back": 1, "of": 1, "unit": "questions"},
        "no triples": {"fell_back": 1, "of": 2, "unit": "questions"},
    }
    summary = {"head_selection": {"held_out_probes": 32, "mean_held_out_hit_rate": 0.09375}}  # 3 of 32 hit
    steered = system_fallbacks([{"trace": steered_trace([0.3, 0.1], [0.2, 0.1])}], summary)
    assert steered == {
        "rewrite": {"fell_back": 1, "of": 1, "unit": "questions"},
        "head selection": {"fell_back": 29.0, "of": 32, "unit": "held-out probes"},
    }
    assert system_fallbacks([{"trace": {"restart": []}}], summary) is None


def silent(prompt: str) -> str:
    """An LLM that never says anything readable: every DTKG decision takes its fallback."""
    return ""


@pytest.fixture
def run(index, questions, scripted_llm, caplog):
    """An evaluation of DTKG and its fixed-chain ablation with a silent LLM, next to two dense-like baselines."""
    corpus = Corpus([Passage(p, p, f"passage {p} about {e}") for p, e in zip(index.passage_ids, "abcde", strict=True)])
    llm = scripted_llm(silent)
    retrievers = {
        "dtkg": DTKGRetriever(llm, encoder=HashEncoder(8), name="dtkg"),
        "dtkg_chain": DTKGRetriever(llm, DTKGSettings(mode="chain"), encoder=HashEncoder(8), name="dtkg_chain"),
    }
    rankings = {name: r.retrieve(questions, index, corpus, top_k=5) for name, r in retrievers.items()}
    fixed = [Ranking(q.id, ["p0", "p1", "p2", "p3", "p4"], [5.0, 4, 3, 2, 1]) for q in questions]
    rankings |= {"bm": fixed, "bm_copy": fixed}  # two baselines that agree: no LLM switch, never marked
    result = evaluate(rankings, questions, index, reference="dtkg", n_boot=50)
    with caplog.at_level(logging.WARNING, logger="glmrag.eval.traces"):
        add_traces(result, retrievers)
    return result, caplog


def _row(md: str, name: str) -> list[str]:
    (line,) = [line for line in md.splitlines() if line.startswith(f"| {name} ")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_results_md_shows_the_fallback_shares_and_the_repeated_rows(run, questions):
    result, caplog = run
    n = len(questions)
    md = format_markdown(result)
    header = md.splitlines()[0]
    assert header.endswith("| LLM fallbacks |")
    dtkg = _row(md, "dtkg (ref)")
    assert dtkg[-1].startswith(f"classifier {n}/{n}, ")  # SmolLM2's 20/20, here by construction
    assert "reranker" in dtkg[-1]
    chain = _row(md, "dtkg_chain (= dtkg)")  # the classifier fell back to chain: the same rankings
    assert "classifier" not in chain[-1]  # a fixed track asks no classifier
    assert _row(md, "bm")[-1] == "–" and _row(md, "bm_copy")[-1] == "–"  # baselines: no LLM, no mark
    lines = md.splitlines()
    under = lines[lines.index(next(line for line in lines if line.startswith("| bm_copy "))) + 2]
    assert under.startswith("**Warning: LLM decisions fell back on more than half of the questions in dtkg (")
    assert "(= x): the same ranked passages" in md and "LLM fallbacks, k/n: on k of the n questions" in md
    assert any("fell back on more than half" in r.getMessage() for r in caplog.get_records("setup"))  # the log
    assert all(r["trace"]["fell_back"][0] == "classifier" for r in result.per_question["dtkg"])


def test_metrics_json_headline_carries_them(run, questions):
    result, _ = run
    n = len(questions)
    headline = json.loads(json.dumps(metrics_json(result)))["headline"]
    dtkg = headline["systems"]["dtkg"]
    assert dtkg["fallbacks"]["classifier"] == {"fell_back": n, "of": n, "unit": "questions"}
    assert dtkg["identical_to"] is None and dtkg["recall@2"] == pytest.approx(result.overall["dtkg"]["recall@2"].mean)
    assert headline["systems"]["dtkg_chain"]["identical_to"] == "dtkg"
    assert headline["systems"]["bm_copy"] == {
        "recall@2": result.overall["bm_copy"]["recall@2"].mean,
        "recall@5": result.overall["bm_copy"]["recall@5"].mean,
        "fallbacks": None,
        "identical_to": None,
    }
    assert headline["warning"].startswith("Warning: LLM decisions fell back")


def test_study_tables_read_them_from_the_stored_run(run):
    result, _ = run
    stored = StoredRun("dtkg-run", None, json.loads(json.dumps(run_record(result, {"study": "dtkg"}))))
    md = format_study_markdown([stored], "Study dtkg")
    assert "| Run | System | Params | Recall@2 | Recall@5 | LLM fallbacks |" in md
    (chain,) = [line for line in md.splitlines() if "| dtkg_chain (= dtkg) |" in line]
    assert not chain.rstrip("| ").endswith("–")
    assert "**dtkg-run: Warning: LLM decisions fell back" in md and "(= x): the same ranked passages" in md
    header, *records = csv.reader(io.StringIO(runs_csv([stored])))
    assert header[-2:] == ["identical_to", "llm_fallbacks"]
    by_system = {r[1]: dict(zip(header, r, strict=True)) for r in records}
    assert by_system["dtkg_chain"]["identical_to"] == "dtkg" and by_system["bm"]["llm_fallbacks"] == ""
    assert by_system["dtkg"]["llm_fallbacks"].startswith("classifier ")
