"""Entity linking by string similarity (DTKG Eq. 5): ``q(e) = argmax_{q in E} sim(e, label(q))``.

``sim`` is difflib's ``SequenceMatcher.ratio`` on normalised names
(:func:`~glmrag.index.normalize.normalize_phrase`). Computing it against all
~20k entities of an index per mention is slow in pure Python, so the
candidates are shortlisted first by the cosine of character-trigram count
vectors (one sparse product over every entity), then the ratio picks among the
``shortlist`` best. An exact normalised match wins at once. Ties go to the
higher trigram cosine, then the lower entity id.

A small model often names the entity in a sentence ("The subject entity of
this statement is Akinoshu Kenji."); :func:`clean_mention` keeps the name
after such a lead-in, so the whole sentence is not what gets linked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

import numpy as np
import scipy.sparse as sp

from glmrag.index.normalize import normalize_phrase

SHORTLIST = 20
"""Entities kept by trigram cosine before the ratio decides (speed only; a stated choice)."""


_LEAD_IN = re.compile(
    r"^(?:the\s+)?(?:main\s+|central\s+|subject\s+)*(?:entity|subject)\b.*?(?:\bis\b:?|:)\s*(?P<name>.+)$",
    re.IGNORECASE,
)


def clean_mention(text: str) -> str:
    """The first line of a model's reply, without a "The ... entity ... is" lead-in, quotes and end punctuation."""
    line = text.strip().split("\n", 1)[0].strip() if text else ""
    m = _LEAD_IN.match(line)
    if m:
        line = m.group("name")
    return line.strip().rstrip(".").strip("\"'`*").rstrip(".").strip()


def trigrams(name: str) -> list[str]:
    """Character trigrams of ``" name "`` (padded so word starts and ends count)."""
    padded = f" {name} "
    return [padded[i : i + 3] for i in range(len(padded) - 2)]


@dataclass(frozen=True)
class Link:
    """A mention linked to an entity id with its string similarity (``ratio`` in [0, 1])."""

    mention: str
    entity: int
    similarity: float


class EntityLinker:
    """Eq. 5 over a fixed list of entity names (an index's :attr:`~glmrag.index.kg.KGIndex.entities`)."""

    def __init__(self, entities: Sequence[str], shortlist: int = SHORTLIST) -> None:
        if shortlist < 1:
            raise ValueError(f"EntityLinker shortlist={shortlist} must be >= 1")
        self.names = [normalize_phrase(e) for e in entities]
        self.shortlist = shortlist
        self.exact: dict[str, int] = {}
        for i, n in enumerate(self.names):
            self.exact.setdefault(n, i)
        self.vocab: dict[str, int] = {}
        rows, cols = [], []
        for i, n in enumerate(self.names):
            for g in trigrams(n):
                rows.append(i)
                cols.append(self.vocab.setdefault(g, len(self.vocab)))
        grams = sp.csr_matrix(
            (np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(len(self.names), len(self.vocab))
        )  # (E, V) counts, duplicates summed
        norms = np.sqrt(np.asarray(grams.multiply(grams).sum(axis=1)).ravel())
        self.grams = sp.diags(np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)) @ grams

    def trigram_cosine(self, mention: str) -> np.ndarray:
        """Shapes: -> (E,) cosine of the mention's trigram counts with every entity's."""
        counts: dict[int, float] = {}
        for g in trigrams(normalize_phrase(mention)):
            if g in self.vocab:
                counts[self.vocab[g]] = counts.get(self.vocab[g], 0.0) + 1.0
        if not counts:
            return np.zeros(len(self.names))
        q = np.zeros(len(self.vocab), dtype=np.float32)
        q[list(counts)] = list(counts.values())
        q /= np.sqrt((np.square(q)).sum())  # unit query over the known grams
        return np.asarray(self.grams @ q).ravel()

    def link(self, mention: str) -> Link | None:
        """The entity whose name is most similar to ``mention``; None for an empty mention or an empty index."""
        norm = normalize_phrase(mention)
        if not norm or not self.names:
            return None
        if norm in self.exact:
            return Link(mention, self.exact[norm], 1.0)
        cos = self.trigram_cosine(norm)
        k = min(self.shortlist, len(cos))
        top = np.argpartition(-cos, k - 1)[:k] if k < len(cos) else np.arange(len(cos))
        ratio, _, best = max(
            (SequenceMatcher(None, norm, self.names[i]).ratio(), cos[i], -int(i)) for i in top
        )  # best ratio, ties to the higher trigram cosine, then the lower id
        return Link(mention, -best, ratio)
