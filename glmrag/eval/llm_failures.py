"""LLM failures in an evaluation: a failed question is scored as failed, counted, and the run goes on.

A retriever that calls an LLM and raises :class:`~glmrag.llm.base.LLMError` on some question is run again
question by question, so only the questions whose calls failed get an empty ranking (recall 0, no answer);
the reader does the same per question (:meth:`glmrag.qa.QAReader._answer_one`). The job's
:func:`~glmrag.llm.base.failure_budget` (``max_llm_failures``) ends a run that fails wholesale: every later
call fails at once, the rest is scored as failed, the outputs are written, and then the job raises.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from glmrag.data.types import Corpus, Question
from glmrag.index.kg import KGIndex
from glmrag.llm.base import LLM_FAILURES, LLM_RETRIES, LLMError, Usage
from glmrag.retrievers.base import AnsweringRetriever, Ranking, Retriever

log = logging.getLogger(__name__)


def retrieve_guarded(
    name: str, retriever: Retriever, questions: Sequence[Question], index: KGIndex, corpus: Corpus, top_k: int
) -> tuple[list[Ranking], list[str]]:
    """The rankings of ``questions`` and the ids of those whose LLM calls failed (ranked empty)."""
    try:
        return retriever.retrieve(questions, index, corpus, top_k=top_k), []
    except LLMError as err:
        log.warning("%s: an LLM call failed (%s); ranking its questions one by one", name, err)
    rankings: list[Ranking] = []
    failed: list[str] = []
    for q in questions:
        try:
            rankings.extend(retriever.retrieve([q], index, corpus, top_k=top_k))
        except LLMError as err:
            log.warning("%s: question %s failed (scored as failed): %s", name, q.id, err)
            failed.append(q.id)
            rankings.append(Ranking(q.id, [], []))
            if isinstance(retriever, AnsweringRetriever):
                retriever.answers[q.id] = ""
    return rankings, failed


class GuardedRetrieval:
    """:func:`retrieve_guarded` as a function of the questions alone (what :func:`~glmrag.eval.timing.timed_retrieve`
    runs); ``failed`` holds the ids of the questions whose LLM calls failed in the latest call."""

    def __init__(self, name: str, retriever: Retriever, index: KGIndex, corpus: Corpus, top_k: int) -> None:
        self.name, self.retriever, self.index, self.corpus, self.top_k = name, retriever, index, corpus, top_k
        self.failed: list[str] = []

    def __call__(self, questions: Sequence[Question]) -> list[Ranking]:
        rankings, self.failed = retrieve_guarded(
            self.name, self.retriever, questions, self.index, self.corpus, self.top_k
        )
        return rankings


def failure_summary(
    failed: Mapping[str, Sequence[str]], costs: Mapping[str, list[dict[str, Usage]]]
) -> dict[str, dict[str, int | list[str]]]:
    """System -> ``failed_questions`` (retrieval failed), ``llm_failures`` and ``llm_retries`` (calls, retriever
    and reader together)."""
    out: dict[str, dict[str, int | list[str]]] = {}
    for system in {*failed, *costs}:
        events = Usage()
        for row in costs.get(system, []):
            events.add(row["retriever"]).add(row["reader"])
        out[system] = {
            "failed_questions": list(failed.get(system, [])),
            LLM_FAILURES: events.events.get(LLM_FAILURES, 0),
            LLM_RETRIES: events.events.get(LLM_RETRIES, 0),
        }
    return dict(sorted(out.items()))
