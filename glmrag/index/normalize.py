"""Phrase normalisation shared by every extractor, the index and the GFM-RAG export.

GFM-RAG (``processing_phrases`` in its KG constructor) lower-cases a phrase and
replaces everything but ``[A-Za-z0-9]`` by spaces, so "Pál Gábor" becomes
"p l g bor". Here every Unicode letter and digit survives ("pál gábor",
"são paulo"); punctuation, symbols and the underscore become spaces, and runs
of whitespace collapse to one space. A phrase made only of punctuation
normalises to the empty string, which callers treat as "no phrase".
"""

from __future__ import annotations

import re
import unicodedata

_NON_WORD = re.compile(r"[\W_]+")


def normalize_phrase(phrase: str) -> str:
    """Return the canonical form of ``phrase``: NFKC, case-folded, letters and digits only, single spaces.

    NFKC first composes "a" + combining tilde into "ã" (a lone combining mark is
    not a word character and would otherwise split the word) and maps
    compatibility forms such as full-width digits to plain ones. ``casefold`` is
    the Unicode-complete ``lower`` ("Straße" -> "strasse").

    >>> normalize_phrase("  São Paulo, Brazil ")
    'são paulo brazil'
    >>> normalize_phrase("C++")
    'c'
    """
    text = unicodedata.normalize("NFKC", phrase).casefold()
    return _NON_WORD.sub(" ", text).strip()


def alnum_count(phrase: str) -> int:
    """Number of letters and digits in ``phrase`` (GFM-RAG skips synonym search below 3)."""
    return sum(ch.isalnum() for ch in phrase)
