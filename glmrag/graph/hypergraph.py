"""The description-labelled hypergraph of HyperAddress (Read the Route §4.1).

Passages are vertices, entities hyperedges. An incidence ``(p, e)`` (passage ``p`` mentions ``e``)
carries a weight ``|e|^-1/2`` (``|e|`` passages in the hyperedge), derived from the incidences and never
stored, so it damps flow through entities many passages mention; and a label: one to three
descriptions of ``e`` as ``p`` describes it. The paper has an LLM write them; :class:`SentenceDescriber`
is the offline fallback, and any :class:`Describer` takes its place. :meth:`Hypergraph.add_passages`
adds passages without touching the others (§4.1, continual learning): batch by batch gives the same
hypergraph as all at once.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, Passage
from glmrag.index.kg import KGIndex
from glmrag.index.normalize import normalize_phrase

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_WORD = re.compile(r"\w+")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` after ``.``, ``!`` or ``?`` followed by white space; empty pieces dropped.

    >>> split_sentences("It rains. Does it? Yes!")
    ['It rains.', 'Does it?', 'Yes!']
    """
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def mention_spans(text: str, phrase: str) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of ``text`` where the normalised ``phrase`` occurs as whole words.

    Matching mirrors :func:`~glmrag.index.normalize.normalize_phrase`: case is
    ignored and any run of punctuation or white space between words matches
    any other, so the entity ``"são paulo brazil"`` is found in "São Paulo,
    Brazil". Offsets refer to ``text`` itself (NFKC may change lengths, so the
    match runs on the original text, case-insensitively).
    """
    words = normalize_phrase(phrase).split()
    if not words:
        return []
    pattern = r"(?<!\w)" + r"[\W_]+".join(re.escape(w) for w in words) + r"(?!\w)"
    flags = re.IGNORECASE | re.UNICODE
    spans = [m.span() for m in re.finditer(pattern, text, flags)]
    if not spans and unicodedata.normalize("NFKC", text) != text:
        # compatibility forms (full-width digits, ligatures): match on the NFKC text only when lengths agree
        folded = unicodedata.normalize("NFKC", text)
        if len(folded) == len(text):
            spans = [m.span() for m in re.finditer(pattern, folded, flags)]
    return spans


class Describer(Protocol):
    """Writes the passage-specific descriptions that label a passage's incidences."""

    name: str

    def describe(self, passage: Passage, entities: Sequence[str]) -> list[tuple[str, ...]]:
        """One to three descriptions of each of ``entities`` as ``passage`` describes them, in the given order."""
        ...


class SentenceDescriber:
    """The offline fallback: the first sentence of the passage that mentions the entity, after its title
    (so a sentence that says "it" still names its subject).

    An entity that no sentence mentions verbatim (OpenIE phrases paraphrase:
    "monthly publication in 1963") is described by the sentence sharing most of
    its words, the first sentence on ties and when none shares any.
    ``max_descriptions`` (at most 3, §4.1) mentioning sentences are kept.
    """

    name = "sentence"

    def __init__(self, max_descriptions: int = 1, with_title: bool = True) -> None:
        if not 1 <= max_descriptions <= 3:
            raise ValueError(f"max_descriptions={max_descriptions}; HyperAddress §4.1 writes one to three")
        self.max_descriptions, self.with_title = max_descriptions, with_title

    def describe(self, passage: Passage, entities: Sequence[str]) -> list[tuple[str, ...]]:
        sentences = split_sentences(passage.text) or [passage.text or passage.title]
        words = [set(_WORD.findall(normalize_phrase(s))) for s in sentences]
        prefix = f"{passage.title}: " if self.with_title and passage.title else ""
        labels = []
        for entity in entities:
            chosen = [i for i, s in enumerate(sentences) if mention_spans(s, entity)][: self.max_descriptions]
            if not chosen:
                target = set(normalize_phrase(entity).split())
                overlap = [len(target & w) for w in words]
                chosen = [int(np.argmax(overlap))]  # first maximum: sentence 0 when nothing overlaps
            labels.append(tuple(prefix + sentences[i] for i in chosen))
        return labels


class Hypergraph:
    """Passages as vertices, entities as hyperedges, descriptions on the incidences (§4.1).

    Incidences are kept in insertion order: passage by passage, and within a
    passage in the order its entities were given. ``entities`` may fix the
    hyperedge vocabulary up front (e.g. a KG index's, so entity ids agree with
    the index); a new entity name met in a passage gets the next id.
    """

    def __init__(self, entities: Sequence[str] = ()) -> None:
        self.passage_ids: list[str] = []
        self.entities: list[str] = list(entities)
        self.entity_id: dict[str, int] = {e: i for i, e in enumerate(self.entities)}
        if len(self.entity_id) != len(self.entities):
            raise ValueError("the entity vocabulary has duplicate names; pass each hyperedge once")
        self._passage_position: dict[str, int] = {}
        self._indptr: list[int] = [0]
        self._inc_passage: list[int] = []
        self._inc_entity: list[int] = []
        self.labels: list[tuple[str, ...]] = []
        """Per incidence, its descriptions (one to three)."""
        self.describer_calls = 0
        """Passages described so far (each passage exactly once)."""

    @property
    def num_passages(self) -> int:
        return len(self.passage_ids)

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_incidences(self) -> int:
        return len(self._inc_passage)

    @property
    def incidence_passage(self) -> np.ndarray:
        """(I,) int64 vertex (passage position) of each incidence."""
        return np.asarray(self._inc_passage, dtype=np.int64)

    @property
    def incidence_entity(self) -> np.ndarray:
        """(I,) int64 hyperedge (entity id) of each incidence."""
        return np.asarray(self._inc_entity, dtype=np.int64)

    def passage_position(self, pid: str) -> int:
        return self._passage_position[pid]

    def edge_sizes(self) -> np.ndarray:
        """(E,) ``|e|``: passages in each hyperedge (0 for a vocabulary entity no passage mentions)."""
        return np.bincount(self.incidence_entity, minlength=self.num_entities)

    def incidence_weights(self) -> np.ndarray:
        """(I,) float64 ``|e|^-1/2`` of each incidence's hyperedge (§4.1)."""
        return self.edge_sizes()[self.incidence_entity].astype(np.float64) ** -0.5

    def incidence_matrix(self, weights: np.ndarray | None = None) -> sp.csr_matrix:
        """(P, E) float64 ``H[p, e]`` = the weight of incidence ``(p, e)`` (default ``|e|^-1/2``), 0 elsewhere."""
        weights = self.incidence_weights() if weights is None else np.asarray(weights, dtype=np.float64)
        shape = (self.num_passages, self.num_entities)
        return sp.csr_matrix((weights, (self.incidence_passage, self.incidence_entity)), shape=shape)

    def incidences_of(self, passage: int) -> range:
        """Incidence rows of passage position ``passage`` (contiguous: a passage's incidences are added together)."""
        return range(self._indptr[passage], self._indptr[passage + 1])

    def add_passages(
        self, passages: Sequence[Passage], mentions: Sequence[Sequence[str]], describer: Describer
    ) -> range:
        """Add ``passages`` (``mentions[i]``: the entity names passage ``i`` mentions) and describe only them.

        Joins each mention to the hyperedge of that name, creating it when new;
        the other passages' incidences and labels are untouched. A passage
        already present raises: its incidences would be counted twice.
        Returns the positions given to the new passages.
        """
        if len(passages) != len(mentions):
            raise ValueError(f"{len(passages)} passages but {len(mentions)} mention lists; give one list per passage")
        start = self.num_passages
        for passage, names in zip(passages, mentions, strict=True):
            if passage.id in self._passage_position:
                raise ValueError(f"passage {passage.id} ({passage.title!r}) is already in the hypergraph")
            names = list(dict.fromkeys(names))  # one incidence per (passage, entity)
            labels = describer.describe(passage, names) if names else []
            self.describer_calls += 1
            if len(labels) != len(names) or any(not 1 <= len(d) <= 3 for d in labels):
                raise ValueError(
                    f"describer {describer.name!r} gave {len(labels)} labels for the {len(names)} entities of "
                    f"passage {passage.id}; expected one tuple of 1-3 descriptions per entity"
                )
            position = len(self.passage_ids)
            self.passage_ids.append(passage.id)
            self._passage_position[passage.id] = position
            for name, label in zip(names, labels, strict=True):
                if name not in self.entity_id:
                    self.entity_id[name] = len(self.entities)
                    self.entities.append(name)
                self._inc_passage.append(position)
                self._inc_entity.append(self.entity_id[name])
                self.labels.append(tuple(label))
            self._indptr.append(len(self._inc_passage))
        return range(start, self.num_passages)

    @classmethod
    def from_index(
        cls, index: KGIndex, corpus: Corpus, describer: Describer | None = None, limit: int | None = None
    ) -> Hypergraph:
        """The hypergraph of ``index``'s passage<->entity map, with the index's entity ids as hyperedge ids.

        ``limit`` keeps only the first passages (the rest can be added later with
        :func:`index_mentions` and :meth:`add_passages`).
        """
        describer = describer or SentenceDescriber()
        graph = cls(index.entities)
        positions = range(index.num_passages if limit is None else min(limit, index.num_passages))
        graph.add_passages(index_passages(index, corpus, positions), index_mentions(index, positions), describer)
        return graph


def _passage(corpus: Corpus, index: KGIndex, position: int) -> Passage:
    pid = index.passage_ids[position]
    if pid not in corpus:
        raise KeyError(f"passage {pid} of the index is not in the corpus; build the index from this corpus")
    return corpus[corpus.position(pid)]


def index_mentions(index: KGIndex, positions: Sequence[int]) -> list[list[str]]:
    """Entity names mentioned by the index's passages at ``positions``, in entity-id order."""
    rows = index.passage_entities
    return [[index.entities[e] for e in sorted(rows[p].indices.tolist())] for p in positions]


def index_passages(index: KGIndex, corpus: Corpus, positions: Sequence[int]) -> list[Passage]:
    """The corpus passages of the index's passage positions ``positions``."""
    return [_passage(corpus, index, p) for p in positions]
