"""The QA part of the evaluation job: who answers, the baselines' scores, and LLM cost per question."""

import pytest

from glmrag.data.types import Corpus, Passage, Question
from glmrag.eval import evaluate
from glmrag.eval.significance import bootstrap_ci
from glmrag.jobs.evaluate import (
    add_qa_and_cost_columns,
    answer_baselines,
    answer_systems,
    baseline_scores,
    llm_costs,
    mean_costs,
    reader_tag,
)
from glmrag.llm.base import Usage
from glmrag.qa import QAReader
from glmrag.retrievers.base import AnsweringRetriever, LLMCostedRetriever, Ranking

QUESTIONS = [Question("q0", "Who?", ("Ann",), ("p0",)), Question("q1", "What?", ("tea",), ("p1",))]
CORPUS = Corpus([Passage("p0", "Ann", "Ann wrote it."), Passage("p1", "Tea", "They drank tea.")])


class Ranked:
    """A retriever that ranks each question's gold passage first and calls no LLM."""

    name = "ranked"

    def retrieve(self, questions, index, corpus, top_k=10):
        return [Ranking(q.id, [q.supporting[0]], [1.0]) for q in questions]


class SelfAnswering(Ranked):
    """Answers itself (as DTKG does) and spent 2 LLM calls on q0, 3 on q1."""

    name = "self_answering"

    def __init__(self):
        self.answers = {"q0": "Ann", "q1": "coffee"}

    def llm_cost(self):
        return {"q0": Usage(calls=2, prompt_tokens=100, generated_tokens=10, seconds=1.0), "q1": Usage(calls=3)}


def _reader(scripted_llm):
    # reads "Wikipedia Title: Ann" -> Ann; anything else -> tea
    return QAReader(
        scripted_llm(lambda text: "Answer: Ann" if "Wikipedia Title: Ann\n" in text.split("Question: ")[-2] else "tea")
    )


def test_an_answering_retriever_keeps_its_answers_and_the_others_go_to_the_reader(kg, scripted_llm):
    retrievers = {"dense": Ranked(), "dtkg": SelfAnswering()}
    assert isinstance(retrievers["dtkg"], AnsweringRetriever) and isinstance(retrievers["dtkg"], LLMCostedRetriever)
    assert not isinstance(retrievers["dense"], LLMCostedRetriever)
    rankings = {name: r.retrieve(QUESTIONS, None, CORPUS) for name, r in retrievers.items()}
    reader = _reader(scripted_llm)
    answers = answer_systems(reader, retrievers, rankings, QUESTIONS, CORPUS)
    assert answers == {"dense": {"q0": "Ann", "q1": "tea"}, "dtkg": {"q0": "Ann", "q1": "coffee"}}
    assert reader.llm.usage.by_method().keys() == {reader_tag("dense")}  # the reader never read for dtkg

    index = kg([[0, 0, 1]], 2, passages=[[0], [1]], links={"q0": [0], "q1": [1]})
    baselines = answer_baselines(reader, ["no_context"], QUESTIONS, index, {})
    assert baselines == {"no_context": {"q0": "tea", "q1": "tea"}}  # 1 fallback each: no "Answer:"
    scores = baseline_scores(baselines, QUESTIONS, n_boot=100, seed=0)
    assert scores["no_context"]["em"] == bootstrap_ci([0.0, 1.0], 100, 0)  # q1's "tea" is right
    costs = llm_costs(["dense", "dtkg", "no_context"], retrievers, reader, QUESTIONS)
    assert [c["reader"].calls for c in costs["dense"]] == [1, 1]
    assert [c["retriever"].calls for c in costs["dense"]] == [0, 0]
    assert [(c["retriever"].calls, c["reader"].calls) for c in costs["dtkg"]] == [(2, 0), (3, 0)]
    assert [c["reader"].calls for c in costs["no_context"]] == [1, 1]
    means = mean_costs(costs)
    assert means["dtkg"]["retriever"] == {"calls": 2.5, "prompt_tokens": 50.0, "generated_tokens": 5.0, "seconds": 0.5}
    assert means["dtkg"]["total"]["calls"] == 2.5 and means["dense"]["total"]["seconds"] == pytest.approx(0.01)

    result = evaluate(rankings, QUESTIONS, index, ks=(1,), n_boot=50, answers_by_system=answers)
    assert result.overall["dtkg"]["em"].mean == 0.5 and result.overall["dense"]["em"].mean == 1.0
    add_qa_and_cost_columns(result, answers, {s: costs[s] for s in ("dense", "dtkg")})
    first = result.per_question["dtkg"][0]
    assert first["prediction"] == "Ann"
    assert (first["llm_calls"], first["llm_prompt_tokens"], first["llm_seconds"]) == (2, 100, 1.0)
    assert result.per_question["dense"][1]["prediction"] == "tea"


def test_an_answering_retriever_must_answer_every_question(scripted_llm):
    lazy = SelfAnswering()
    lazy.answers = {"q0": "Ann"}
    rankings = {"dtkg": lazy.retrieve(QUESTIONS, None, CORPUS)}
    with pytest.raises(ValueError, match="retriever dtkg answers its questions but has no answer for 1"):
        answer_systems(_reader(scripted_llm), {"dtkg": lazy}, rankings, QUESTIONS, CORPUS)
