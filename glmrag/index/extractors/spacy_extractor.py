"""Offline extraction with spaCy: any corpus gets a usable graph without an LLM.

:class:`SpacyExtractor` takes as entities the named entities of ``en_core_web_sm`` (values like
numbers skipped, dates kept) and the noun chunks that overlap none, and the passage title, since
Wikipedia-style passages are about their title. Triples come from the dependency parse, in the surface
form OpenIE uses (``(s, "was born in", o)``), plus a relation between nearby entity pairs. Only what the
rules need runs: the lemmatizer is disabled (relations keep the verb's surface form, as OpenIE's do).
"""

from __future__ import annotations

import logging
from functools import lru_cache

from spacy.language import Language
from spacy.tokens import Doc, Span, Token

from glmrag.data.types import Corpus
from glmrag.index.extractors.base import DEFAULT_SPACY_MODEL, SKIP_LABELS, Extractor, PassageExtraction, Triple
from glmrag.progress import progress

log = logging.getLogger(__name__)

MAX_PIECE = 100_000
"""Characters parsed as one spaCy doc: spaCy's guide puts parser + NER memory at ~1 GB per 100,000
(the reason for its ``max_length`` of 1,000,000, error E088)."""

SUBJECT_PRONOUNS = frozenset({"he", "she", "it", "they"})
_SUBJ = frozenset({"nsubj", "nsubjpass"})
_OBJ = frozenset({"dobj", "attr", "oprd"})
_PREP = frozenset({"prep", "agent", "dative"})
_STRIP_HEAD = frozenset({"DET", "PRON", "PUNCT", "CCONJ", "SPACE"})
_STRIP_CHUNK_HEAD = _STRIP_HEAD | {"NUM"}
_STRIP_TAIL = frozenset({"PUNCT", "PART", "SPACE", "CCONJ"})


def load_nlp(model: str = DEFAULT_SPACY_MODEL) -> Language:
    """The spaCy pipeline (tagger, parser, NER; lemmatizer off), loaded once per process and model."""
    return _load_nlp(model)


@lru_cache(maxsize=2)
def _load_nlp(model: str) -> Language:
    import spacy

    return spacy.load(model, disable=["lemmatizer"])


def _trim(span: Span, strip_head: frozenset[str] = _STRIP_HEAD) -> Span | None:
    """``span`` without leading ``strip_head`` tokens and trailing punctuation; None if nothing word-like is left."""
    doc, start, end = span.doc, span.start, span.end
    while start < end and doc[start].pos_ in strip_head:
        start += 1
    while end > start and doc[end - 1].pos_ in _STRIP_TAIL:
        end -= 1
    if start == end or not any(t.is_alpha or t.is_digit for t in doc[start:end]):
        return None
    if all(t.is_stop for t in doc[start:end]):
        return None
    return doc[start:end]


def mention_spans(doc: Doc, skip_labels: tuple[str, ...] = SKIP_LABELS, noun_chunks: bool = True) -> list[Span]:
    """Entity mentions of ``doc`` in text order, non-overlapping.

    Named entities whose label is not in ``skip_labels``, then (if
    ``noun_chunks``) the noun chunks that overlap none of them, trimmed by
    :func:`_trim`; chunks also lose leading numbers ("three films" -> "films").
    """
    taken = bytearray(len(doc))
    spans = []
    for ent in doc.ents:
        if ent.label_ not in skip_labels and (span := _trim(ent)) is not None:
            taken[ent.start : ent.end] = b"\x01" * len(ent)
            spans.append(span)
    if noun_chunks:
        for chunk in doc.noun_chunks:
            if not any(taken[chunk.start : chunk.end]) and (span := _trim(chunk, _STRIP_CHUNK_HEAD)) is not None:
                spans.append(span)
    return sorted(spans, key=lambda s: s.start)


class SpacyExtractor(Extractor):
    """Entities and triples from spaCy NER, noun chunks and dependency rules.

    Entities: named entities except :data:`SKIP_LABELS` (numbers, percentages, quantities and money join
    unrelated passages through values like "two"; dates are kept because multi-hop questions ask for
    them), the noun chunks that overlap no named entity with leading determiners and pronouns stripped
    ("the film" -> "film"), and the passage title. Triples:

    * subject -> verb -> object: ``nsubj``/``nsubjpass`` -> verb (+ ``auxpass``, particle) ->
      ``dobj``/``attr``/``oprd`` gives ``(s, "directed", o)``; a preposition on the verb gives
      ``(s, "was born in", o)``; a preposition on the object or adjectival complement gives
      ``(s, "is professor at", o)``. Conjuncts share their verb's arguments; a conjoined verb without a
      subject takes its head's ("was born in X and was awarded Y").
    * A subject pronoun (he, she, it, they) stands for the passage title.
    * Every other pair of entities at most ``pair_window`` mentions apart in a sentence is linked by the
      verb that governs both (their lowest common ancestor) or, when that is not a verb, by
      ``pair_relation``.

    Report keys: ``passages``, ``sentences``, ``mentions``, ``dependency_triples``,
    ``pair_triples`` and ``pronoun_subjects`` (subjects resolved to the title).
    """

    name = "spacy"

    def __init__(
        self,
        model: str = DEFAULT_SPACY_MODEL,
        skip_labels: tuple[str, ...] = SKIP_LABELS,
        noun_chunks: bool = True,
        pronoun_to_title: bool = True,
        pair_window: int = 2,
        pair_relation: str = "related to",
        batch_size: int = 64,
        n_process: int = 1,
    ) -> None:
        super().__init__()
        if pair_window < 0 or batch_size < 1 or n_process < 1:
            raise ValueError(
                f"need pair_window >= 0, batch_size >= 1, n_process >= 1; got {pair_window}, {batch_size}, {n_process}"
            )
        self.model, self.skip_labels, self.noun_chunks = model, tuple(skip_labels), noun_chunks
        self.pronoun_to_title, self.pair_window, self.pair_relation = pronoun_to_title, pair_window, pair_relation
        self.batch_size, self.n_process = batch_size, n_process

    def settings(self) -> dict:
        """Everything that changes the output (not ``batch_size``/``n_process``)."""
        return {
            "model": self.model,
            "skip_labels": list(self.skip_labels),
            "noun_chunks": self.noun_chunks,
            "pronoun_to_title": self.pronoun_to_title,
            "pair_window": self.pair_window,
            "pair_relation": self.pair_relation,
        }

    def extract(self, corpus: Corpus) -> list[PassageExtraction]:
        """Parse every passage text with ``nlp.pipe`` and apply the rules; corpus order."""
        self.report = dict.fromkeys(("passages", "sentences", "mentions", "dependency_triples", "pair_triples"), 0)
        self.report["pronoun_subjects"] = 0
        nlp = load_nlp(self.model)
        pieces = [self._pieces(p) for p in corpus]
        flat = (piece for parts in pieces for piece in parts)
        parsed = iter(nlp.pipe(flat, batch_size=self.batch_size, n_process=self.n_process))
        out = []
        passages = progress(zip(pieces, corpus, strict=True), "spaCy extraction", total=len(corpus), unit="passage")
        for parts, p in passages:
            docs = [next(parsed) for _ in parts]
            doc = docs[0] if len(docs) == 1 else Doc.from_docs(docs, ensure_whitespace=True)
            out.append(self._extract_doc(doc, p.id, p.title))
        return out

    def _pieces(self, passage) -> list[str]:
        """The passage's text in pieces of at most :data:`MAX_PIECE` characters, cut at whitespace.

        One spaCy doc needs about 1 GB per 100,000 characters, and longer texts than ``nlp.max_length``
        abort the whole build (E088); long passages are parsed piece by piece and joined
        (``Doc.from_docs``), counted as ``chunked_passages`` and logged with the passage's id and title.
        """
        text = passage.text
        if len(text) <= MAX_PIECE:
            return [text]
        pieces = []
        while len(text) > MAX_PIECE:
            cut = text.rfind(" ", MAX_PIECE // 2, MAX_PIECE)
            cut = cut if cut > 0 else MAX_PIECE
            pieces.append(text[:cut])
            text = text[cut:]
        pieces.append(text)
        self.count("chunked_passages")
        log.warning(
            "passage %s (%r) has %d characters; parsed in %d pieces of at most %d",
            passage.id, passage.title[:60], len(passage.text), len(pieces), MAX_PIECE,
        )  # fmt: skip
        return pieces

    def _extract_doc(self, doc: Doc, pid: str, title: str) -> PassageExtraction:
        spans = mention_spans(doc, self.skip_labels, self.noun_chunks)
        span_of = [-1] * len(doc)  # token -> index into spans
        for k, span in enumerate(spans):
            span_of[span.start : span.end] = [k] * len(span)
        names = [span.text for span in spans] + [title]
        title_id = len(spans)
        self.count("passages")
        self.count("mentions", len(spans))

        def entity(tok: Token, as_subject: bool = False) -> int:
            if span_of[tok.i] >= 0:
                return span_of[tok.i]
            if as_subject and self.pronoun_to_title and tok.lower_ in SUBJECT_PRONOUNS:
                self.count("pronoun_subjects")
                return title_id
            return -1

        triples: dict[Triple, None] = {}
        for sent in doc.sents:
            self.count("sentences")
            before = len(triples)
            linked: set[frozenset[int]] = set()
            for verb in sent:
                if verb.pos_ not in ("VERB", "AUX"):
                    continue
                subjects = [e for s in _subjects(verb) if (e := entity(s, as_subject=True)) >= 0]
                if not subjects:
                    continue
                for relation, obj in _objects(verb):
                    o = entity(obj)
                    for s in subjects:
                        if o >= 0 and o != s:
                            triples[(names[s], relation, names[o])] = None
                            linked.add(frozenset((s, o)))
            n_dep = len(triples)
            self.count("dependency_triples", n_dep - before)
            self._pair_triples(sent, spans, span_of, names, linked, triples)
            self.count("pair_triples", len(triples) - n_dep)
        return PassageExtraction(pid, [title] + [span.text for span in spans], list(triples))

    def _pair_triples(
        self,
        sent: Span,
        spans: list[Span],
        span_of: list[int],
        names: list[str],
        linked: set[frozenset[int]],
        triples: dict[Triple, None],
    ) -> None:
        """Link nearby mentions of ``sent`` not already joined by a dependency triple (see the module docstring)."""
        in_sent = sorted({span_of[t.i] for t in sent if span_of[t.i] >= 0})
        for a, i in enumerate(in_sent):
            for j in in_sent[a + 1 : a + 1 + self.pair_window]:
                if frozenset((i, j)) in linked or names[i] == names[j]:
                    continue
                lca = _common_ancestor(spans[i].root, spans[j].root)
                relation = lca.lower_ if lca.pos_ in ("VERB", "AUX") else self.pair_relation
                triples.setdefault((names[i], relation, names[j]), None)


def _subjects(verb: Token) -> list[Token]:
    """Subject tokens of ``verb`` with their conjuncts; a subject-less conjoined verb inherits its head's."""
    subjects = [c for c in verb.children if c.dep_ in _SUBJ]
    if not subjects and verb.dep_ == "conj" and verb.head.pos_ in ("VERB", "AUX"):
        return _subjects(verb.head)
    return [t for s in subjects for t in _expand(s)]


def _expand(tok: Token) -> tuple[Token, ...]:
    """``tok``, its conjuncts and its appositions ("its editor, Jan Solovej," is also Jan Solovej)."""
    return (tok, *tok.conjuncts, *(c for c in tok.children if c.dep_ == "appos"))


def _verb_phrase(verb: Token) -> str:
    """The verb as OpenIE writes it: passive auxiliary, verb, particle ("was born", "took over")."""
    aux = [c.lower_ for c in verb.children if c.dep_ == "auxpass"]
    prt = [c.lower_ for c in verb.children if c.dep_ == "prt"]
    return " ".join([*aux[:1], verb.lower_, *prt])


def _prep_objects(head: Token) -> list[tuple[str, Token]]:
    """``(preposition, object)`` for every prepositional child of ``head`` and the conjuncts of its objects."""
    out = []
    for prep in head.children:
        if prep.dep_ in _PREP and prep.pos_ == "ADP":
            for pobj in prep.children:
                if pobj.dep_ == "pobj":
                    out.extend((prep.lower_, o) for o in _expand(pobj))
    return out


def _objects(verb: Token) -> list[tuple[str, Token]]:
    """``(relation, object token)`` pairs governed by ``verb`` (see the module docstring)."""
    base = _verb_phrase(verb)
    out = [(f"{base} {prep}", o) for prep, o in _prep_objects(verb)]
    for child in verb.children:
        if child.dep_ in _OBJ:
            out.extend((base, o) for o in _expand(child))
        if child.dep_ in _OBJ or child.dep_ == "acomp":
            out.extend((f"{base} {child.lower_} {prep}", o) for prep, o in _prep_objects(child))
    return out


def _common_ancestor(a: Token, b: Token) -> Token:
    """Lowest token that is ``a`` or an ancestor of ``a`` and also ``b`` or an ancestor of ``b``."""
    above_b = {b.i, *(t.i for t in b.ancestors)}
    for t in (a, *a.ancestors):
        if t.i in above_b:
            return t
    return a.sent.root
