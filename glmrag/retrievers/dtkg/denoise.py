"""Task-aware denoising (DTKG §3.4, Eqs. 15-16; Table 4's three modes).

Two kinds of irrelevant relations (§3.4):

- administrative ones, pruned by the static keyword library ``K_invalid`` =
  {ID, source, version, metadata} (Eq. 15). The paper writes ``k in
  label(r)``; here a keyword must be a whole word of the label (case aside),
  because as a substring "id" would also prune "provided", "video", "did";
- redundant attributes, pruned by an LLM necessity score of the relation for
  the question (Eq. 16): the LLM answers 0-10, scaled to [0, 1], and a
  relation scoring below θ_n is discarded. An answer without a number keeps
  the relation (score 1) and counts ``necessity_fallback``.

The modes (Table 4):

- ``none``: nothing is filtered, the chained track's θ (§3.3.2 (iii)) included:
  Table 4's baseline is "without any filtering";
- ``generic``: "fixed administrative rules and global thresholding without
  task-specific LLM judgment": Eq. 15 plus the global threshold θ on the
  combined score (:data:`~glmrag.retrievers.dtkg.settings.THRESHOLD`, whose value is chosen so that it
  bites under every scoring mode), the same on both tracks;
- ``task_aware`` (full): Eq. 15, θ, and Eq. 16; on the parallel track also the
  "cross-redundant" triples (the same triple among the top triples of several
  facts) are kept only for the fact they score highest with.

The necessity prompts of one step go out as one batched generate call, and
only for the candidates that would otherwise be used (a fact's top ``k``, a
layer's chosen relations), which keeps the LLM cost at O(n) and O(D W).
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
