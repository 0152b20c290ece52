"""Routing a question to a track: the few-shot classifier (DTKG §3.2, App. C.1/C.3) and Table 2's fixed modes.

The classifier is one 6-shot prompt with the five rules of Table 8
(:mod:`~glmrag.retrievers.dtkg.prompts`); its reply is read with
:func:`~glmrag.llm.parse.parse_choice` over ``chained`` / ``parallel``. A
reply with neither word falls back to ``chain`` (counted as
``label_fallback``): chained questions are 90.8 % of MuSiQue (App. A.2), the
benchmark this project evaluates on.

The ablation modes of Table 2 skip the LLM: ``parallel`` (Only-Fact
Verification), ``chain`` (Only-Reasoning Chain) and ``random`` (Random
Classification: a fair coin from the question's seeded generator).
"""

from __future__ import annotations

import numpy as np

from glmrag.llm.base import LLM
from glmrag.llm.parse import parse_choice
from glmrag.retrievers.dtkg import prompts

TRACKS = ("parallel", "chain")
FALLBACK_LABEL = "chained"
"""The label of an unreadable classifier reply (MuSiQue is 90.8 % chained, App. A.2)."""


class TrackRouter:
    def __init__(self, llm: LLM, mode: str) -> None:
        self.llm, self.mode = llm, mode
        self.reason = ""
        """Why the last :meth:`route` chose its track (for the trace): the classifier's reply, a fallback,
        the fixed mode or the random draw."""

    def classify(self, question: str) -> str:
        """The classifier's track for ``question`` (one LLM call of a few tokens)."""
        text = self.llm.complete(prompts.classify(question), max_new_tokens=4, stop=["\n"])
        readable = parse_choice(text, prompts.CLASS_CHOICES, None) is not None
        label = parse_choice(text, prompts.CLASS_CHOICES, FALLBACK_LABEL, counter=self.llm.usage)
        reply = text.strip()[:40]
        self.reason = f"classifier: {reply!r}" if readable else f"classifier fallback to chain: {reply!r}"
        return "chain" if label == "chained" else "parallel"

    def route(self, question: str, rng: np.random.Generator) -> str:
        """``parallel`` or ``chain`` for one question, by the classifier or the fixed mode."""
        if self.mode == "auto":
            return self.classify(question)
        if self.mode == "random":
            self.reason = "random draw"
            return TRACKS[int(rng.integers(2))]
        self.reason = f"fixed mode {self.mode}"
        return self.mode
