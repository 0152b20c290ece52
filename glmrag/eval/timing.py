"""Retrieval cost split into one-off setup and per-question time, so neither hides the other.

A retriever's first :meth:`~glmrag.retrievers.base.Retriever.retrieve` pays for what it
builds once per corpus (a model load, corpus embeddings, HyperAddress descriptions). Dividing
one wall time by the number of questions made dense look like 20 s per question on 100
questions and ``hyperaddress_1round`` slower than ``_2rounds``. :func:`timed_retrieve` first
runs the retriever on one question (setup + one question), then on all of them (warm):

* ``ms_per_question`` = warm wall time / number of questions;
* ``setup_s`` = first call's wall time - one warm question (floored at 0).

The rankings, answers and LLM costs kept are the warm call's, over every question. An
:class:`~glmrag.retrievers.base.AnsweringRetriever` (DTKG: each call spends LLM calls) is run
once: its setup is not separated (``setup_s`` None) and its per-question time includes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from glmrag.data.types import Corpus, Question
from glmrag.index.kg import KGIndex
from glmrag.retrievers.base import AnsweringRetriever, Ranking, Retriever


def timed_retrieve(
    retriever: Retriever,
    questions: Sequence[Question],
    index: KGIndex,
    corpus: Corpus,
    top_k: int,
    run: Callable[[Sequence[Question]], list[Ranking]] | None = None,
) -> tuple[list[Ranking], float | None, float]:
    """``(rankings, setup_s, ms_per_question)`` of ``retriever`` on ``questions`` (see the module docstring).

    ``run`` replaces ``retriever.retrieve(questions, index, corpus, top_k=top_k)`` when given (the evaluation
    job's :class:`~glmrag.eval.llm_failures.GuardedRetrieval`, which scores failed LLM calls as failed)."""
    if run is None:

        def run(qs: Sequence[Question]) -> list[Ranking]:
            return retriever.retrieve(list(qs), index, corpus, top_k=top_k)

    n = max(len(questions), 1)
    first = None
    if questions and not isinstance(retriever, AnsweringRetriever):
        start = time.perf_counter()
        run(list(questions[:1]))
        first = time.perf_counter() - start
    start = time.perf_counter()
    rankings = run(list(questions))
    warm = time.perf_counter() - start
    setup = None if first is None else max(first - warm / n, 0.0)
    return rankings, setup, 1000 * warm / n
