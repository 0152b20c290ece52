"""Question rewriting between HyperAddress rounds (Read the Route §4.2, App. A), never over a named anchor.

App. A: "a question span is replaced with the name of the entity most likely described, when span-label
cosine similarity is at least 0.7". Only a description is replaced, never what the question names: the named
anchors are where the walk starts (an audit of an earlier version replaced a journal's name by its
publisher's and lost the question's only anchor). A candidate span overlaps no anchor
(:func:`anchor_spans`) and holds a word outside :data:`FUNCTION_WORDS`; it is compared with the incidence
labels without their ``"{title}: "`` prefix, which names the passage, not the entity (:func:`without_title`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.graph.hypergraph import mention_spans

CONNECTORS = frozenset({"of", "the", "and", "de", "del", "du", "la", "le", "von", "van", "der", "for", "on", "in", "&"})
"""Lower-case words that continue a capitalised name when a capitalised word follows ("Journal of X")."""
FUNCTION_WORDS = frozenset(
    "a an the of in on at to for from by with and or is was were are be been did does do what who whom whose "
    "which where when why how that this these those it its as".split()
)
"""Words that alone never make a description (a span of only these is not rewritten)."""
_WORD = re.compile(r"\S+")
_QUOTED = re.compile(r"\"[^\"]+\"|“[^”]+”")
_STRIP = "?.,!;:()\"'“”"


def word_spans(question: str) -> list[tuple[int, int]]:
    """Character spans of the white-space separated words of ``question``, without their edge punctuation."""
    out = []
    for m in _WORD.finditer(question):
        a, b = m.span()
        while a < b and question[a] in _STRIP:
            a += 1
        while b > a and question[b - 1] in _STRIP:
            b -= 1
        if a < b:
            out.append((a, b))
    return out


def anchor_spans(question: str, titles: Sequence[str] = (), names: Sequence[str] = ()) -> list[tuple[int, int]]:
    """Character spans of ``question`` that name something; never rewritten.

    An anchor is a run of capitalised words with :data:`CONNECTORS` between them ("Journal of Psychotherapy
    Integration"), a word with a digit, a quoted phrase, or a mention in any case of one of ``titles`` (the
    read passages' titles) or ``names`` (the question's linked entities and NER mentions: the index names
    "rugby union" in lower case, and "an international in rugby union" must keep it whole).
    """
    words = word_spans(question)
    bare = [question[a:b].strip(_STRIP) for a, b in words]
    capital = [bool(w) and w[0].isupper() for w in bare]
    named = [c or any(ch.isdigit() for ch in w) for c, w in zip(capital, bare, strict=True)]
    for i, w in enumerate(bare):  # "Journal of Psychotherapy Integration": connectors between capitals
        if w.lower() in CONNECTORS and 0 < i < len(bare) - 1 and capital[i - 1]:
            nxt = next((j for j in range(i + 1, len(bare)) if bare[j].lower() not in CONNECTORS), None)
            named[i] = nxt is not None and capital[nxt]
    out = [words[i] for i, n in enumerate(named) if n]
    out += [m.span() for m in _QUOTED.finditer(question)]
    for name in (*titles, *names):
        out += mention_spans(question, name)
    return out


def candidate_spans(question: str, max_span: int, anchors: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Runs of 1 to ``max_span`` words that overlap no anchor and hold a content word."""
    words = word_spans(question)
    free = [not any(a < e and s < b for s, e in anchors) for a, b in words]
    content = [question[a:b].strip(_STRIP).lower() not in FUNCTION_WORDS for a, b in words]
    spans = []
    for i in range(len(words)):
        for j in range(i, min(i + max_span, len(words))):
            if not free[j]:
                break
            if any(content[i : j + 1]):
                spans.append((words[i][0], words[j][1]))
    return spans


def without_title(label: str, title: str) -> str:
    """``label`` without a leading ``"{title}: "`` (the sentence labels' passage prefix)."""
    prefix = f"{title}: "
    return label[len(prefix) :] if title and label.startswith(prefix) else label


@dataclass(frozen=True)
class Rewrite:
    """One rewrite: the question before and after, the span replaced, the label it matched and their cosine."""

    before: str
    after: str
    span: str
    entity: int
    label: str
    cosine: float

    def as_dict(self) -> dict:
        return {
            "before": self.before,
            "after": self.after,
            "span": self.span,
            "entity": self.entity,
            "label": self.label,
            "cosine": round(self.cosine, 4),
        }


def best_rewrite(
    question: str,
    spans: Sequence[tuple[int, int]],
    labels: Sequence[tuple[int, str]],
    names: dict[int, str],
    encode: Callable[[list[str]], np.ndarray],
    threshold: float,
) -> Rewrite | None:
    """The span-label pair of highest cosine, if at least ``threshold``: the span replaced by its entity's name.

    ``labels`` are (entity, description) pairs; ``names`` the text that replaces a span, per entity;
    ``encode`` maps texts to (N, d) unit rows. Ties go to the earlier span, then the earlier label.
    """
    if not spans or not labels:
        return None
    label_vectors = encode([text for _, text in labels])  # (N, d)
    span_vectors = encode([question[a:b].strip(_STRIP) for a, b in spans])  # (S, d)
    cosine = span_vectors @ label_vectors.T  # (S, N)
    s, n = np.unravel_index(int(np.argmax(cosine)), cosine.shape)
    if cosine[s, n] < threshold:
        return None
    a, b = spans[s]
    entity, label = labels[n]
    after = question[:a] + names[entity] + question[b:]
    return Rewrite(question, after, question[a:b], int(entity), label, float(cosine[s, n]))
