"""Per-question traces, per-system summaries and index cost of LLM methods in the evaluator's outputs (issue 12)."""

import numpy as np

from glmrag.eval.traces import add_traces, summary_lines
from glmrag.llm.base import Usage


class Traced:
    def traces(self):
        return {"q1": {"track": "chain", "score": np.float32(0.5), "rows": np.arange(2)}}

    def trace_summary(self):
        return {"tracks": {"chain": 1}, "fallbacks": {"label_fallback": np.int64(2)}}

    def index_llm_cost(self):
        return {"hyperaddress_heads": Usage(calls=3, prompt_tokens=30, seconds=1.5)}


class Result:
    def __init__(self):
        self.systems = ["m", "dense"]
        self.per_question = {
            "m": [{"question_id": "q1"}, {"question_id": "q2"}],
            "dense": [{"question_id": "q1"}],
        }
        self.method_summary, self.index_llm_cost, self.llm_cost, self.acc_llm_judge = {}, {}, {}, {}


def test_traces_go_into_rows_and_summaries_into_the_report():
    result = Result()
    add_traces(result, {"m": Traced(), "dense": object()})
    assert result.per_question["m"][0]["trace"] == {"track": "chain", "score": 0.5, "rows": [0, 1]}
    assert "trace" not in result.per_question["m"][1] and "trace" not in result.per_question["dense"][0]
    assert result.method_summary == {"m": {"tracks": {"chain": 1}, "fallbacks": {"label_fallback": 2}}}
    cost = result.index_llm_cost["m"]["hyperaddress_heads"]
    assert cost == {"calls": 3, "prompt_tokens": 30, "generated_tokens": 0, "seconds": 1.5}
    text = "\n".join(summary_lines(result))
    assert "| m | **tracks**: chain 1; **fallbacks**: label_fallback 2 |" in text
    assert "| m | hyperaddress_heads | 3 | 30 | 0 | 1.50 |" in text


def test_nothing_traced_adds_nothing():
    result = Result()
    add_traces(result, {"dense": object()})
    assert result.method_summary == {} and result.index_llm_cost == {} and summary_lines(result) == []
