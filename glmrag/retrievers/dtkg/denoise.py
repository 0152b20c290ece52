"""Task-aware denoising (DTKG §3.4, Eqs. 15-16) in Table 4's three modes.

- ``none``: nothing is filtered, the chained track's θ included (Table 4: "without any filtering");
- ``generic``: the keyword library ``K_invalid`` (Eq. 15) and the global threshold θ on combined scores;
- ``task_aware`` (full): Eq. 15, θ, and the LLM's necessity score (Eq. 16: 0-10, scaled to [0, 1], below
  θ_n dropped; no number keeps the relation and counts ``necessity_fallback``); on the parallel track a
  triple among the top triples of several facts stays only with the fact it scores highest for.

A keyword must be a whole word of the relation label (the paper's ``k in label(r)`` as a substring would
prune "provided" for "id"). Necessity prompts of one step go out as one batched call, for used candidates only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from glmrag.llm.base import LLM
from glmrag.retrievers.dtkg import prompts
from glmrag.retrievers.dtkg.settings import DTKGSettings

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[a-z0-9]+")


class Denoiser:
    def __init__(self, settings: DTKGSettings, llm: LLM) -> None:
        self.mode, self.llm = settings.denoise, llm
        self.keywords = frozenset(settings.keywords)
        self.threshold, self.necessity_threshold = settings.threshold, settings.necessity_threshold

    def is_administrative(self, label: str) -> bool:
        """Eq. 15: a keyword of ``K_invalid`` is a word of the relation label."""
        return not self.keywords.isdisjoint(_WORD.findall(label.lower()))

    def screen(self, labels: Sequence[str], scores: np.ndarray) -> np.ndarray:
        """The LLM-free part: Eq. 15 and the threshold θ (``generic``, ``task_aware``). Shapes: (C,) -> (C,) bool."""
        keep = np.ones(len(labels), dtype=bool)
        if self.mode == "none":
            return keep
        keep &= np.asarray([not self.is_administrative(label) for label in labels], dtype=bool)
        return keep & (np.asarray(scores, dtype=np.float64) >= self.threshold)

    def necessity(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """Eq. 16, one batched call. Shapes: ``texts`` (C,) -> (C,) float64 in [0, 1]."""
        gens = self.llm.generate([prompts.necessity(question, t) for t in texts], max_new_tokens=4, stop=["\n"])
        out = np.ones(len(texts))
        for i, g in enumerate(gens):
            m = _NUMBER.search(g.text)
            if m is None:
                self.llm.usage.count("necessity_fallback")
                continue
            out[i] = min(float(m.group()), 10.0) / 10.0
        return out

    def necessary(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """Keep mask of Eq. 16 (``task_aware`` only; all kept otherwise). Shapes: (C,) -> (C,) bool."""
        if self.mode != "task_aware" or not texts:
            return np.ones(len(texts), dtype=bool)
        return self.necessity(question, texts) >= self.necessity_threshold

    def cross_redundant(self, groups: Sequence[Sequence[tuple[int, float]]]) -> list[list[tuple[int, float]]]:
        """``task_aware``: a triple shared by several facts' lists stays only in the list where it scores
        highest (the first such list on a tie). ``groups`` hold (triple row, score) pairs."""
        if self.mode != "task_aware":
            return [list(g) for g in groups]
        best: dict[int, tuple[float, int]] = {}
        for i, group in enumerate(groups):
            for row, score in group:
                if row not in best or score > best[row][0]:
                    best[row] = (score, i)
        return [[(row, s) for row, s in group if best[row][1] == i] for i, group in enumerate(groups)]
