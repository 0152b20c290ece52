"""Answer accuracy (ACC) beside EM/F1 (DTKG §4.1, Tables 1-4), in two offline forms, each labelled as what it is.

DTKG's ACC is "semantic match accuracy", ``1[f_phi(y_hat, y*) >= tau]`` with a pretrained similarity
model ``f_phi`` and a threshold the paper does not give. Neither is available offline, so glmrag reports
two stand-ins, never under the paper's name alone: ``acc`` ("ACC (contains)"), 1 if a normalised gold
alias occurs in the normalised prediction as whole words (:func:`~glmrag.eval.metrics.normalize_answer`),
the lenient match multi-hop papers use; and ``acc_llm_judge`` ("ACC (LLM judge, <model>)"), an
:class:`~glmrag.llm.base.LLM` asked whether the prediction means the gold answer (:class:`LLMJudge`; an
unreadable reply counts ``label_fallback`` and scores None, left out of the mean).
"""

from __future__ import annotations

from collections.abc import Sequence

from glmrag.eval.metrics import contains_match
from glmrag.llm.base import LLM
from glmrag.llm.parse import parse_choice

JUDGE_TAG = "acc_llm_judge"
"""Usage tag of the judge's calls (they are evaluation cost, not any system's)."""


__all__ = ["JUDGE_TAG", "LLMJudge", "contains_match", "judge_prompt"]


def judge_prompt(question: str, prediction: str, answers: Sequence[str]) -> str:
    gold = " / ".join(a for a in answers if a.strip())
    return (
        f"Question: {question}\nGold answer: {gold}\nPredicted answer: {prediction}\n"
        "Does the predicted answer mean the same as the gold answer? Reply yes or no.\nReply:"
    )


class LLMJudge:
    """ACC by an LLM judge through the project's LLM interface (labelled ``ACC (LLM judge, <model>)``)."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.label = f"ACC (LLM judge, {getattr(llm, 'name', type(llm).__name__)})"

    def judge(self, questions: Sequence[str], predictions: Sequence[str], answers: Sequence[Sequence[str]]) -> list:
        """Per item 1.0 (same meaning), 0.0, or None (unreadable reply); one batched generate call."""
        prompts = [judge_prompt(q, p, a) for q, p, a in zip(questions, predictions, answers, strict=True)]
        with self.llm.track(JUDGE_TAG):
            gens = self.llm.generate(prompts, max_new_tokens=3, stop=["\n"]) if prompts else []
        out = []
        for g in gens:
            said = parse_choice(g.text, ("yes", "no"), None)
            if said is None:
                with self.llm.track(JUDGE_TAG):
                    self.llm.usage.count("label_fallback")
            out.append(None if said is None else float(said == "yes"))
        return out


def add_judged_accuracy(per_question: dict[str, list[dict]], questions, judge: LLMJudge) -> dict[str, dict]:
    """Give every answered row an ``acc_llm_judge`` (1 / 0 / None) from ``judge``; per system the mean over the
    readable verdicts, how many were unreadable, and the judge's label (for ``metrics.json`` and the report)."""
    by_id = {q.id: q for q in questions}
    out = {}
    for system, rows in per_question.items():
        answered = [row for row in rows if row.get("prediction") is not None]
        verdicts = judge.judge(
            [by_id[r["question_id"]].question for r in answered],
            [r["prediction"] for r in answered],
            [by_id[r["question_id"]].answers for r in answered],
        )
        for row, verdict in zip(answered, verdicts, strict=True):
            row["acc_llm_judge"] = verdict
        readable = [v for v in verdicts if v is not None]
        out[system] = {
            "label": judge.label,
            "mean": sum(readable) / len(readable) if readable else None,
            "judged": len(readable),
            "unreadable": len(verdicts) - len(readable),
        }
    return out
