"""Entity linking by string similarity (DTKG Eq. 5): ``q(e) = argmax_{q in E} sim(e, label(q))``.

``sim`` is rapidfuzz's ``fuzz.ratio`` / 100 on normalised names, ``2 LCS(a, b) / (|a| + |b|)``, exact over
every entity of the index; ties go to the lower entity id. Eq. 5 always returns an entity; here a best match
below :data:`MIN_SIMILARITY` is unlinked (:meth:`EntityLinker.link` returns None), so a mention that names
nothing in the KG takes its track's explicit fallback instead of an arbitrary entity.
:func:`clean_mention` strips a small model's lead-in ("The subject entity of this statement is X.").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz, process

from glmrag.index.normalize import normalize_phrase

MIN_SIMILARITY = 0.5
"""Least ``sim`` of a link; the paper has no threshold (Eq. 5 is a bare argmax), so this is a stated choice:
at 0.5 the mention and the name share as many characters (in order) as they do not, the point below which a
match is more different than alike. "barak obama" -> "barack obama" scores 0.96, "zzzz qqq" -> its best
match about 0.13."""


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


@dataclass(frozen=True)
class Link:
    """A mention linked to an entity id with its string similarity (``sim`` in [0, 1])."""

    mention: str
    entity: int
    similarity: float


class EntityLinker:
    """Eq. 5 over a fixed list of entity names (an index's :attr:`~glmrag.index.kg.KGIndex.entities`)."""

    def __init__(self, entities: Sequence[str], min_similarity: float = MIN_SIMILARITY) -> None:
        if not 0.0 <= min_similarity <= 1.0:
            raise ValueError(f"EntityLinker min_similarity={min_similarity} must be in [0, 1]")
        self.names = [normalize_phrase(e) for e in entities]
        self.min_similarity = min_similarity
        self.exact: dict[str, int] = {}
        for i, n in enumerate(self.names):
            self.exact.setdefault(n, i)

    def best(self, mention: str) -> Link | None:
        """The most similar entity whatever its similarity (Eq. 5's bare argmax); None for an empty mention
        or an empty index."""
        norm = normalize_phrase(mention)
        if not norm or not self.names:
            return None
        if norm in self.exact:
            return Link(mention, self.exact[norm], 1.0)
        _, score, entity = process.extractOne(norm, self.names, scorer=fuzz.ratio, processor=None)
        return Link(mention, int(entity), score / 100.0)

    def link(self, mention: str) -> Link | None:
        """:meth:`best` if its similarity reaches ``min_similarity``, else None (unlinked)."""
        found = self.best(mention)
        return found if found is not None and found.similarity >= self.min_similarity else None
