import json
import re

import numpy as np
import pytest

from glmrag.data.types import Question
from glmrag.eval import evaluate, format_markdown, write_outputs
from glmrag.eval.outputs import format_console
from glmrag.retrievers.base import Ranking

GLM = {  # question -> ranked passages; entity rankings for the analysis measures
    "q_deep": ["p1", "p2", "p0", "p3", "p4"],  # all metrics 1
    "q_near": ["p0", "p1", "p2", "p3", "p4"],  # 1
    "q_far": ["p0", "p1", "p2", "p4", "p3"],  # recall@2 0, recall@5 1, mrr 0.2
    "q_noseed": ["p0", "p1", "p2", "p3", "p4"],  # 1
    "q_nogold": ["p0", "p1", "p2", "p3", "p4"],  # excluded
    "q_seedgold": ["p1", "p0", "p2", "p3", "p4"],  # recall@1 0, recall@2 1, mrr 0.5
}
DENSE = {
    "q_deep": ["p1", "p0", "p2", "p3", "p4"],  # recall@2 0.5, filtered recall@2 1.0
    "q_near": ["p1", "p2", "p3", "p4", "p0"],  # recall@2 0, recall@5 1
    "q_far": ["p3", "p0", "p1", "p2", "p4"],
    "q_noseed": ["p0", "p1", "p2", "p3", "p4"],
    "q_nogold": ["p0", "p1", "p2", "p3", "p4"],
    "q_seedgold": ["p0", "p1", "p2", "p3", "p4"],
}


def rank(order: dict[str, list[str]], entities: bool) -> list[Ranking]:
    out = []
    for qid, pids in order.items():
        ents = dict(entity_ids=[1, 2, 4], entity_scores=[3.0, 2.0, 1.0]) if entities else {}
        out.append(Ranking(qid, pids, [float(-i) for i in range(len(pids))], **ents))
    return out[::-1]  # order must not matter


@pytest.fixture
def result(index, questions):
    q_emb = np.tile([1.0, 0.0], (len(questions), 1))  # (Q, 2), at 0°
    answers = {"glm": {q.id: "wrong" for q in questions} | {"q_seedgold": "the beatles"}}
    return evaluate(
        {"glm": rank(GLM, True), "dense": rank(DENSE, False)},
        questions,
        index,
        reference="glm",
        question_embeddings=q_emb,
        n_boot=200,
        answers_by_system=answers,
        min_paired=2,  # six questions: the test mechanics, not a claim (MIN_PAIRED guards real tables)
    )


def test_overall_and_counts(result):
    assert result.counts == {"questions": 6, "evaluated": 5, "excluded_no_gold": 1}
    glm, dense = result.overall["glm"], result.overall["dense"]
    assert glm["recall@2"].mean == pytest.approx(4 / 5) and glm["recall@2"].n == 5
    assert glm["recall@1"].mean == pytest.approx((0.5 + 1 + 0 + 1 + 0) / 5)
    assert glm["mrr"].mean == pytest.approx((1 + 1 + 0.2 + 1 + 0.5) / 5)
    assert dense["recall@2"].mean == pytest.approx((0.5 + 0 + 1 + 1 + 1) / 5)
    assert dense["filtered_recall@2"].mean == pytest.approx((1 + 0 + 1 + 1 + 1) / 5)
    assert glm["recall@2"].low <= glm["recall@2"].mean <= glm["recall@2"].high
    assert glm["em"].mean == pytest.approx(1 / 6) and glm["em"].n == 6
    assert "em" not in dense
    # entities b (60°), c (90°), e (0°): cosines 0.5, 0, 1; seeds-to-entity hops over reachable ones
    assert glm["entity_cosine"].mean == pytest.approx(0.5)
    assert "entity_cosine" not in dense and "entity_hops" not in dense


def test_per_question_rows(result):
    rows = {r["question_id"]: r for r in result.per_question["glm"]}
    assert [r["question_id"] for r in result.per_question["glm"]] == result.question_ids
    assert rows["q_nogold"]["recall@2"] is None and rows["q_nogold"]["density_bucket"] is None
    assert rows["q_nogold"]["em"] == 0.0
    assert rows["q_far"]["mrr"] == pytest.approx(0.2)
    assert rows["q_deep"]["depth"] == 3 and rows["q_far"]["depth_bucket"] == "unreachable"
    assert rows["q_deep"]["top_passages"] == GLM["q_deep"]
    assert rows["q_near"]["entity_hops"] == pytest.approx(1.5)  # b: 1, c: 2, e unreachable from a
    assert rows["q_nogold"]["entity_hops"] == pytest.approx(0.5)  # seed b: b 0, c 1, e unreachable
    assert rows["q_noseed"]["entity_hops"] is None


def test_breakdowns(result):
    depth = result.breakdowns["depth"]["glm"]
    assert list(depth) == ["0", "1", "3", "unreachable"]
    assert [depth[b]["n"] for b in depth] == [1, 1, 1, 2]
    assert depth["unreachable"]["recall@2"] == pytest.approx(0.5)  # q_far 0, q_noseed 1
    # densities of the evaluated questions: q_noseed 0, q_deep/q_near/q_far 2, q_seedgold 3
    density = result.breakdowns["density"]["dense"]
    assert {b: v["n"] for b, v in density.items()} == {"low": 2, "mid": 2, "high": 1}
    assert density["low"]["recall@2"] == pytest.approx((0.5 + 1) / 2)  # q_noseed, q_deep
    assert list(result.breakdowns["n_supporting"]["glm"]) == ["1", "2"]
    assert list(result.breakdowns["hops"]["glm"]) == ["1", "2", "unknown"]


def test_significance_table(result):
    assert [(c.system, c.metric) for c in result.significance] == [("dense", "recall@2"), ("dense", "recall@5")]
    assert all(0 < c.p_value <= c.p_holm <= 1 for c in result.significance)


def test_qa_can_be_tested(index, questions):
    rankings = {"glm": rank(GLM, True), "dense": rank(DENSE, False)}
    answers = {"glm": {q.id: "b" for q in questions}, "dense": {q.id: "zzz" for q in questions}}
    res = evaluate(
        rankings, questions, index, reference="glm", answers_by_system=answers, test_metrics=["em", "f1"], min_paired=2
    )
    assert [c.metric for c in res.significance] == ["em", "f1"]
    assert res.overall["dense"]["em"].n == 6 and res.overall["glm"]["em"].mean == pytest.approx(1 / 6)


def test_rankings_must_cover_the_same_questions(index, questions):
    with pytest.raises(ValueError, match=r"system 'dense' .* 1 of the 6 questions missing"):
        evaluate({"glm": rank(GLM, True), "dense": rank(DENSE, False)[1:]}, questions, index)
    with pytest.raises(ValueError, match="two rankings"):
        evaluate({"glm": rank(GLM, True) + rank(GLM, True)[:1]}, questions, index)
    with pytest.raises(ValueError, match="reference system 'gnn'"):
        evaluate({"glm": rank(GLM, True)}, questions, index, reference="gnn")
    with pytest.raises(ValueError, match="lacks predicted answers"):
        evaluate({"glm": rank(GLM, True)}, questions, index, answers_by_system={"glm": {}})
    with pytest.raises(ValueError, match="cannot be tested"):
        evaluate({"glm": rank(GLM, True)}, questions, index, reference="glm", test_metrics=["entity_hops"])
    with pytest.raises(ValueError, match="shape"):
        evaluate({"glm": rank(GLM, True)}, questions, index, question_embeddings=np.ones((2, 2)))


def test_markdown_and_files(result, tmp_path):
    md = format_markdown(result)
    header = md.splitlines()[0]
    assert header.startswith("| System | Recall@2 | Recall@5 | Filtered R@2 | Filtered R@5 | Hits@5 | All@5 | MRR")
    assert "| glm (ref) | 80.0 [" in md
    assert re.search(r"\| dense \| \d+\.\d \[\d+\.\d, \d+\.\d\]", md)
    assert "overstates recall" in md and "Holm-Bonferroni" in md and "Entity cos" in md

    paths = write_outputs(result, tmp_path / "out")
    with pytest.raises(FileExistsError, match="metrics.json"):
        write_outputs(result, tmp_path / "out")  # a file is never replaced
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["metrics.json", "per_question.jsonl", "results.md"]
    assert paths["results.md"].read_text() == md
    metrics = json.loads(paths["metrics.json"].read_text())
    assert metrics["overall"]["glm"]["recall@2"]["mean"] == pytest.approx(0.8)
    assert metrics["significance"][0]["system"] == "dense" and "p_holm" in metrics["significance"][0]
    assert metrics["breakdowns"]["depth"]["glm"]["3"]["n"] == 1
    lines = [json.loads(line) for line in paths["per_question.jsonl"].read_text().splitlines()]
    assert len(lines) == 12 and {row["system"] for row in lines} == {"glm", "dense"}


def test_markers_for_significant_differences(index_factory):
    n = 40
    qids = [f"q{i}" for i in range(n)]
    index = index_factory({q: [0] for q in qids})
    questions = [Question(q, "what is b?", ("b",), ("p0",), hops=1) for q in qids]
    good = [Ranking(q, ["p0", "p1", "p2", "p3", "p4"], [5, 4, 3, 2, 1]) for q in qids]
    bad = [Ranking(q, ["p1", "p2", "p3", "p4", "p0"], [5, 4, 3, 2, 1]) for q in qids]
    res = evaluate({"good": good, "bad": bad}, questions, index, ks=(2, 5), reference="good", n_boot=1000)
    by_metric = {c.metric: c for c in res.significance}
    assert by_metric["recall@2"].p_holm == pytest.approx(2 / 1001) and by_metric["recall@2"].marker == "**"
    assert by_metric["recall@5"].p_holm == 1.0 and by_metric["recall@5"].marker == ""
    assert "| bad | 0.0 [0.0, 0.0]\\*\\* | 100.0 [100.0, 100.0] |" in format_markdown(res)
    assert "| bad | 0.0 [0.0, 0.0]** | 100.0 [100.0, 100.0] |" in format_console(res)  # a terminal: no escapes
    flipped = evaluate({"good": good, "bad": bad}, questions, index, ks=(2, 5), reference="bad", n_boot=1000)
    assert "| good | 100.0 [100.0, 100.0]† |" in format_markdown(flipped)


@pytest.mark.parametrize("score", [0.0, float("nan"), float("-inf")], ids=["tied", "nan", "-inf"])
def test_a_system_that_ranks_nothing_is_named_above_the_table(index, questions, score):
    """Scores all tied or not finite in every question: the order is the listing order, not a ranking (an
    untrained or broken model); the table says so. Tied scores in one question only are no sign."""
    flat = [Ranking(r.question_id, r.passage_ids, [score] * len(r.passage_ids)) for r in rank(DENSE, False)]
    result = evaluate({"glm": rank(GLM, False), "flat": flat}, questions, index, reference="glm", n_boot=50)
    assert len(result.warnings) == 1 and result.warnings[0].startswith("flat: every question's passage scores")
    assert format_markdown(result).startswith(f"**{result.warnings[0]}**")
    one_tied = [*flat[:1], *rank(DENSE, False)[1:]]
    assert evaluate({"glm": rank(GLM, False), "dense": one_tied}, questions, index, n_boot=50).warnings == []
