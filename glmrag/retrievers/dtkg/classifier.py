"""Routing a question to a track: the few-shot classifier (DTKG §3.2, App. C.1/C.3) or a fixed mode of Table 2.

The classifier is one 6-shot prompt with Table 8's five rules (:mod:`~glmrag.retrievers.dtkg.prompts`). It
asks the paper's yes/no question ("yes": chained, "no": parallel) or, with ``labels="chained_parallel"``, for
the track names. A reply with neither word routes to ``chain`` and counts ``label_fallback``: 90.8 % of
MuSiQue is chained (DTKG App. A.2). The modes ``parallel``, ``chain`` and ``random`` (a fair coin from the
question's seeded generator) skip the LLM.
"""

from __future__ import annotations

import numpy as np

from glmrag.llm.base import LLM
from glmrag.llm.parse import parse_choice
from glmrag.retrievers.dtkg import prompts

TRACKS = ("parallel", "chain")


class TrackRouter:
    def __init__(self, llm: LLM, mode: str, labels: str = "yes_no") -> None:
        if labels not in prompts.CLASS_CHOICES:
            raise ValueError(f"classifier labels {labels!r} are unknown; expected one of {list(prompts.CLASS_CHOICES)}")
        self.llm, self.mode, self.labels = llm, mode, labels
        self.reason = ""
        """Why the last :meth:`route` chose its track (for the trace): the classifier's reply, a fallback,
        the fixed mode or the random draw."""

    def classify(self, question: str) -> str:
        """The classifier's track for ``question`` (one LLM call of a few tokens)."""
        text = self.llm.complete(prompts.classify(question, self.labels), max_new_tokens=4, stop=["\n"])
        choices = prompts.CLASS_CHOICES[self.labels]
        readable = parse_choice(text, choices, None) is not None
        # unreadable: the chained word, MuSiQue being 90.8 % chained (App. A.2)
        label = parse_choice(text, choices, choices[0], counter=self.llm.usage)
        reply = text.strip()[:40]
        self.reason = f"classifier: {reply!r}" if readable else f"classifier fallback to chain: {reply!r}"
        return "chain" if label == choices[0] else "parallel"

    def route(self, question: str, rng: np.random.Generator) -> str:
        """``parallel`` or ``chain`` for one question, by the classifier or the fixed mode."""
        if self.mode == "auto":
            return self.classify(question)
        if self.mode == "random":
            self.reason = "random draw"
            return TRACKS[int(rng.integers(2))]
        self.reason = f"fixed mode {self.mode}"
        return self.mode
