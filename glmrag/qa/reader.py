"""The QA reader: an LLM answers each question from its context with GLM-RAG's one-shot prompt.

GLM-RAG §4.3: "an LM generates the answer from the query and the top-k documents"; App. E, Fig. 20
gives the prompt (see :mod:`glmrag.qa.prompts`). The model writes ``Thought: ... Answer: ...``; the
answer is what follows the last ``Answer:`` (:func:`parse_answer`). EM and F1 of the answers are the
evaluator's (:func:`glmrag.eval.metrics.qa_metrics`, SQuAD normalisation, GLM-RAG §5.1 "Metrics").

Every generation runs under ``llm.track(tag, question.id)``, so ``llm.usage.by_question(tag)`` is the
reader's cost per question, and the answer fallbacks are counted there too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from glmrag.data.types import Corpus, Question
from glmrag.llm.base import LLM, LLMError, Message, UsageCounter
from glmrag.qa.context import PASSAGES, QAContext, passage_context
from glmrag.qa.prompts import chat_prompt, family_of
from glmrag.retrievers.base import Ranking

log = logging.getLogger(__name__)

MAX_NEW_TOKENS = 128
"""Room for a short thought and the answer. GLM-RAG does not state its generation length; SmolLM2-135M
generated 43 tokens on average on 20 musique100 questions with the top-5 dense passages, 1 of 20 reaching 128."""
STOP = ("\nQuestion:", "\nWikipedia Title:")
"""A model that goes on after its answer starts a new example; cut it there so the last ``Answer:`` is its own."""
ANSWER_FALLBACK = "answer_fallback"
"""Usage event: the response had no ``Answer:`` followed by text; its last non-empty line was taken."""

_ANSWER = re.compile(r"answer\s*:", re.IGNORECASE)
_THOUGHT = re.compile(r"^\s*thought\s*:\s*", re.IGNORECASE)


def _clean(line: str) -> str:
    """Strip spaces and Markdown emphasis, then a trailing period (Fig. 20's example ends "Answer: no.")."""
    return line.strip().strip("*").strip().removesuffix(".").strip()


def parse_answer(text: str, counter: UsageCounter | None = None) -> str:
    """The answer in a ``Thought: ... Answer: ...`` response. Never raises.

    The first non-empty line after the last ``Answer:`` (any case), stripped of spaces, Markdown ``*``
    and a trailing period. When there is no ``Answer:`` with text after it, the fallback is the last
    non-empty line before it (a leading ``Thought:`` removed), counted as :data:`ANSWER_FALLBACK` on
    ``counter`` under the current usage tag; an empty response gives ``""``, also counted.
    """
    markers = list(_ANSWER.finditer(text))
    if markers:
        after = text[markers[-1].end() :]
        line = next((s for s in after.splitlines() if s.strip()), "")
        if _clean(line):
            return _clean(line)
        text = text[: markers[-1].start()]
    if counter is not None:
        counter.count(ANSWER_FALLBACK)
    lines = [s for s in text.splitlines() if _clean(s)]
    return _clean(_THOUGHT.sub("", lines[-1])) if lines else ""


class QAReader:
    """Answers questions from their contexts with one LLM (GLM-RAG §4.3, App. E).

    Args:
        llm: the generating model (``configs/llm/*.yaml``; GLM-RAG uses gpt-4o-mini, §5.1).
        dataset: dataset name choosing the worked example (:func:`glmrag.qa.prompts.family_of`).
        passages: top passages of a ranking the reader reads (:data:`glmrag.qa.context.PASSAGES`).
        max_new_tokens: generation budget per answer (:data:`MAX_NEW_TOKENS`).
        concurrency: questions in flight at once; more than 1 only helps a backend that serves requests
            in parallel (an HTTP server). Each question is its own ``generate`` call, because usage is
            counted per call under one tag and the reader's cost is reported per question; a local model
            gains nothing from batching these long prompts (4 musique100 prompts: 14.7 s batched, 13.0 s
            one by one with SmolLM2 on two CPU cores).
    """

    def __init__(
        self,
        llm: LLM,
        dataset: str | None = None,
        passages: int = PASSAGES,
        max_new_tokens: int = MAX_NEW_TOKENS,
        concurrency: int = 1,
    ) -> None:
        if passages < 1:
            raise ValueError(f"QAReader passages is {passages}; expected at least 1 (GLM-RAG reads the top 5)")
        if max_new_tokens < 1:
            raise ValueError(f"QAReader max_new_tokens is {max_new_tokens}; expected at least 1")
        if concurrency < 1:
            raise ValueError(f"QAReader concurrency is {concurrency}; expected at least 1")
        self.llm = llm
        self.dataset = dataset
        self.family = family_of(dataset)
        self.passages = passages
        self.max_new_tokens = max_new_tokens
        self.concurrency = concurrency

    def settings(self) -> dict:
        """What a reader of the results needs to know about this reader."""
        return {
            "llm": getattr(self.llm, "name", type(self.llm).__name__),
            "family": self.family,
            "passages": self.passages,
            "max_new_tokens": self.max_new_tokens,
        }

    def prompt(self, question: Question | str, context: QAContext) -> list[Message]:
        """The chat for one question (:func:`glmrag.qa.prompts.chat_prompt`)."""
        text = question.question if isinstance(question, Question) else question
        documents = [(p.title, p.text) for p in context.passages]
        return chat_prompt(text, self.family, documents=documents, triples=list(context.triples))

    def _answer_one(self, question: Question, context: QAContext, tag: str) -> str:
        """The answer, or ``""`` (scored as wrong) when the LLM failed; failures are counted in ``llm.usage``."""
        with self.llm.track(tag, question.id):
            try:
                (generation,) = self.llm.generate(
                    [self.prompt(question, context)], max_new_tokens=self.max_new_tokens, temperature=0.0, stop=STOP
                )
            except LLMError as err:
                log.warning("%s: question %s failed (scored as unanswered): %s", tag, question.id, err)
                return ""
            return parse_answer(generation.text, self.llm.usage)

    def answer(self, questions: Sequence[Question], contexts: Sequence[QAContext], tag: str = "qa") -> dict[str, str]:
        """Question id -> predicted answer, each generated under ``llm.track(tag, question.id)``.

        ``contexts`` are aligned with ``questions``.
        """
        if len(questions) != len(contexts):
            raise ValueError(f"answer() got {len(questions)} questions but {len(contexts)} contexts; give one each")
        ids = [q.id for q in questions]
        if len(set(ids)) != len(ids):
            raise ValueError("answer() got a question id twice; question ids must be unique")
        if self.concurrency == 1:
            answers = [self._answer_one(q, c, tag) for q, c in zip(questions, contexts, strict=True)]
        else:
            # Worker threads start with an empty usage tag; _answer_one sets its own.
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                answers = list(pool.map(lambda qc: self._answer_one(*qc, tag), zip(questions, contexts, strict=True)))
        return dict(zip(ids, answers, strict=True))

    def read(
        self,
        questions: Sequence[Question],
        rankings: Sequence[Ranking] | Mapping[str, Ranking],
        corpus: Corpus,
        tag: str,
    ) -> dict[str, str]:
        """Answer each question from the top :attr:`passages` passages of its ranking."""
        by_id = rankings if isinstance(rankings, Mapping) else {r.question_id: r for r in rankings}
        missing = [q.id for q in questions if q.id not in by_id]
        if missing:
            raise ValueError(
                f"{tag}: no ranking for {len(missing)} questions (e.g. {missing[:3]}); rank every question"
            )
        contexts = [passage_context(by_id[q.id], corpus, self.passages) for q in questions]
        return self.answer(questions, contexts, tag)
