"""Build a :class:`~glmrag.index.kg.KGIndex` from a corpus, its questions and an extractor.

The stages of GFM-RAG's KG-index construction, which GLM-RAG reuses (GLM-RAG §4.1, Table 14): extract,
normalise phrases, collect vocabularies and triples, add ``equivalent`` edges between entities whose
embeddings are close (:class:`IndexSettings`), link question mentions to entities. Every distinct
``(head, relation, tail)`` is kept, where GFM-RAG's ``{(h, t): r}`` keeps the last relation of a pair. The
embedding and the synonym search log their progress (:mod:`glmrag.progress`). The per-passage stages
(:func:`extract_part`) and the global ones (:func:`assemble_index`) are separate, so a sharded build
(:mod:`glmrag.index.shards`) runs the first on several machines and the second once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import partial

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, QASet, Question
from glmrag.index.embed import DEFAULT_MODEL, Embedder
from glmrag.index.extractors.base import DEFAULT_SPACY_MODEL, Extractor, PassageExtraction
from glmrag.index.kg import SYNONYM_RELATION, KGIndex
from glmrag.index.normalize import alnum_count, normalize_phrase
from glmrag.index.resolve import link_mentions, question_mentions, synonym_pairs

FORMAT_VERSION = 2
"""Version of the index layout; bump it when the meaning or files of an index change."""


@dataclass(frozen=True)
class IndexSettings:
    """Everything besides the extractor that decides what :func:`build_index` produces."""

    synonym_threshold: float = 0.8
    """Cosine at or above which an ``equivalent`` edge is added (GFM-RAG ``threshold``)."""
    synonym_top_k: int = 100
    """At most this many synonym edges leave one entity (GFM-RAG ``max_sim_neighbors``); 0 adds none."""
    synonym_min_chars: int = 3
    """Entities with fewer letters and digits get no outgoing synonym edges (GFM-RAG: more than two)."""
    synonym_same_numbers: bool = True
    """Only entities with the same numbers (digit runs, as a multiset) can be synonyms: MiniLM scores
    "14 october 1950" and "22 august 1951" (or "75 proof" and "80 proof") above 0.8. Not in GFM-RAG."""
    synonym_exact_max: int = 100_000
    """Groups of up to this many entities get the exact synonym search (quadratic); larger ones an approximate
    search (:mod:`glmrag.index.ann`, ~m^1.5; recall measured in ``benchmarks/scaling.md``). The
    default keeps every index of the shipped datasets exact (2Wiki test: 59k entities in all)."""
    embed_model: str | None = DEFAULT_MODEL
    """Entity and mention embedding model; None: no embeddings, no synonyms, exact-match question links."""
    spacy_model: str = DEFAULT_SPACY_MODEL
    """spaCy pipeline that finds the mentions of a question."""
    link_min_score: float = 0.0
    """Question links below this cosine are dropped; a question left with none keeps its best link when
    ``link_fallback`` (counted as ``questions_fallback_linked``), else stays unlinked."""
    link_fallback: bool = True
    """Keep a question's best link when every link is below ``link_min_score`` (GFM-RAG links every question to
    its nearest entities, however far); False: such a question has no link (``questions_linked`` drops)."""
    include_isolated_entities: bool = True
    """Keep extracted entities that are in no triple; False gives GFM-RAG's set (triple endpoints only)."""

    def __post_init__(self) -> None:
        if not -1.0 <= self.synonym_threshold <= 1.0:
            raise ValueError(f"synonym_threshold is a cosine in [-1, 1], got {self.synonym_threshold}")
        if self.synonym_top_k < 0 or self.synonym_min_chars < 0 or self.synonym_exact_max < 0:
            raise ValueError(
                "synonym_top_k, synonym_min_chars and synonym_exact_max must be >= 0, got "
                f"{self.synonym_top_k}, {self.synonym_min_chars}, {self.synonym_exact_max}"
            )
        if not -1.0 <= self.link_min_score <= 1.0:
            raise ValueError(f"link_min_score is a cosine in [-1, 1], got {self.link_min_score}")
        if self.embed_model is not None and not self.embed_model:
            raise ValueError("embed_model must be a model name or path, or None for no embeddings")


def _jsonable(obj) -> dict:
    """``obj`` as it reads back from JSON (tuples become lists), so saved and built manifests compare equal."""
    return json.loads(json.dumps(obj))


def expected_manifest(
    corpus: Corpus, questions: QASet | Sequence[Question], extractor: Extractor, settings: IndexSettings
) -> dict:
    """The manifest entries an index built from these inputs must carry (what ``load_index(expect=...)`` checks)."""
    qa = questions if isinstance(questions, QASet) else QASet(list(questions))
    return _jsonable(
        {
            "format_version": FORMAT_VERSION,
            "corpus_hash": corpus.content_hash(),
            "questions_hash": qa.content_hash(),
            "extractor": extractor.describe(),
            "settings": asdict(settings),
        }
    )


Normalised = tuple[list[str], list[tuple[str, str, str]]]
"""One passage's normalised ``(entities, triples)``."""


def _normalise(extractions: list[PassageExtraction], report: dict[str, int]) -> list[Normalised]:
    """Normalised ``(entities, triples)`` per passage; parts that normalise to "" are dropped and counted."""
    out = []
    for ex in extractions:
        entities = [n for e in ex.entities if (n := normalize_phrase(e))]
        report["entities_empty_after_normalize"] += len(ex.entities) - len(entities)
        triples = []
        for triple in ex.triples:
            norm = tuple(normalize_phrase(part) for part in triple)
            if all(norm):
                triples.append(norm)
            else:
                report["triples_empty_after_normalize"] += 1
        out.append((entities, triples))
    return out


def _entity_passages(per_passage, entity_id: dict[str, int], n_passages: int) -> sp.csr_matrix:
    """(E, P) binary map: the passage's extracted entities (if in the vocabulary) and its triple endpoints."""
    rows, cols = [], []
    for p, (entities, triples) in enumerate(per_passage):
        names = {*entities, *(t[0] for t in triples), *(t[2] for t in triples)}
        ids = [entity_id[n] for n in names if n in entity_id]
        rows.extend(ids)
        cols.extend([p] * len(ids))
    data = np.ones(len(rows), dtype=np.float32)
    return sp.csr_matrix((data, (rows, cols)), shape=(len(entity_id), n_passages))


def _passage_facts(per_passage, entity_id, relation_id, triples: np.ndarray) -> sp.csr_matrix:
    """(P, T) counts: how often passage p states the normalised fact ``triples[t]`` (HippoRAG's docs -> facts).

    HippoRAG weighs a graph edge by these occurrences and scores a passage by its distinct facts
    (``passage_facts > 0``), so both are kept.
    """
    row_of = {tuple(t): i for i, t in enumerate(triples.tolist())}
    rows = [p for p, (_, facts) in enumerate(per_passage) for _ in facts]
    cols = [row_of[(entity_id[h], relation_id[r], entity_id[t])] for _, facts in per_passage for h, r, t in facts]
    data = np.ones(len(rows), dtype=np.float32)  # duplicates summed into counts by the constructor
    return sp.csr_matrix((data, (rows, cols)), shape=(len(per_passage), len(triples)))


def number_groups(entities: Sequence[str]) -> np.ndarray:
    """(E,) int64 group id per entity: equal ids iff the entities contain the same digit runs (as a multiset)."""
    ids: dict[tuple[str, ...], int] = {}
    return np.array([ids.setdefault(tuple(sorted(re.findall(r"\d+", e))), len(ids)) for e in entities], dtype=np.int64)


def resolve_embedder(embedder: Embedder | None, settings: IndexSettings) -> Embedder | None:
    """``embedder``, or one of ``settings.embed_model`` when None (no embedder when that is None too); an
    embedder of another model is an error."""
    if embedder is None:
        return Embedder(settings.embed_model) if settings.embed_model is not None else None
    if embedder.model_name != settings.embed_model:
        raise ValueError(
            f"the embedder uses {embedder.model_name!r} but settings.embed_model is {settings.embed_model!r}; "
            "pass IndexSettings(embed_model=...) matching the embedder (or no embedder)"
        )
    return embedder


@dataclass
class IndexPart:
    """The per-passage work of a build on a run of consecutive passages (all of them, or one shard's).

    :func:`extract_part` makes it; :func:`assemble_index` joins the parts of a corpus into its index.
    """

    passage_ids: list[str]
    """The passages, in corpus order."""
    per_passage: list[Normalised]
    """Normalised ``(entities, triples)`` of each passage (parts that normalise to "" dropped)."""
    report: dict[str, int]
    """The extractor's report plus the normalisation counts."""
    phrases: list[str]
    """Sorted entity candidates of these passages (:func:`entity_names`)."""
    vectors: np.ndarray | None
    """(len(phrases), d) float32 unit rows, or None when built without an embedder."""
    timings: dict[str, float]
    """Wall seconds of ``extract`` and ``embed_entities``."""


def entity_names(per_passage: Sequence[Normalised], include_isolated: bool) -> set[str]:
    """The entities these passages contribute: triple endpoints, and extracted entities when ``include_isolated``.

    The entity vocabulary of a corpus is the union over its passages, so it does not depend on how it is split.
    """
    names = {n for _, triples in per_passage for t in triples for n in (t[0], t[2])}
    if include_isolated:
        names.update(e for entities, _ in per_passage for e in entities)
    return names


def extract_part(corpus: Corpus, extractor: Extractor, embedder: Embedder | None, settings: IndexSettings) -> IndexPart:
    """Extract and normalise the passages of ``corpus`` and embed their entity candidates (the per-passage work)."""
    t0 = time.perf_counter()
    extractions = extractor.extract(corpus)
    if [ex.passage_id for ex in extractions] != corpus.ids:
        raise ValueError(f"{extractor!r} returned extractions that are not one per passage in corpus order")
    timings = {"extract": time.perf_counter() - t0}
    report = dict(extractor.report) | {"entities_empty_after_normalize": 0, "triples_empty_after_normalize": 0}
    per_passage = _normalise(extractions, report)
    phrases = sorted(entity_names(per_passage, settings.include_isolated_entities))
    t1 = time.perf_counter()
    vectors = embedder.encode(phrases) if embedder is not None else None
    timings["embed_entities"] = time.perf_counter() - t1
    return IndexPart(corpus.ids, per_passage, report, phrases, vectors, timings)


def _entity_embeddings(parts: Sequence[IndexPart], entity_id: dict[str, int]) -> np.ndarray | None:
    """(E, d) rows of the parts' phrase vectors; a phrase of several parts takes the first part's vector."""
    if any(part.vectors is None for part in parts):
        return None
    emb = np.zeros((len(entity_id), parts[0].vectors.shape[1]), dtype=np.float32)
    for part in reversed(parts):  # the first part writes last, so its vectors win
        emb[[entity_id[p] for p in part.phrases]] = part.vectors
    return emb


def build_index(
    corpus: Corpus,
    questions: QASet | Sequence[Question],
    extractor: Extractor,
    embedder: Embedder | None = None,
    settings: IndexSettings | None = None,
) -> KGIndex:
    """Extract, normalise, resolve and link: the KG index of ``corpus`` for ``questions``.

    Entities and relations are the sorted sets of normalised phrases (so ids do
    not depend on passage order; ``equivalent`` is always a relation). Triples
    are the sorted distinct ``(h, r, t)`` rows, synonym edges included. With
    ``embedder`` None, one is made from ``settings.embed_model`` (or none when
    that is None); an embedder of another model is an error. The manifest
    records the inputs' hashes, extractor, settings, counts and timings.
    One machine: :func:`extract_part` of the whole corpus, then :func:`assemble_index` (a sharded build,
    :mod:`glmrag.index.shards`, assembles the parts of several machines).
    """
    settings = settings or IndexSettings()
    embedder = resolve_embedder(embedder, settings)
    part = extract_part(corpus, extractor, embedder, settings)
    return assemble_index(corpus, questions, [part], extractor, embedder, settings)


def assemble_index(
    corpus: Corpus,
    questions: QASet | Sequence[Question],
    parts: Sequence[IndexPart],
    extractor: Extractor,
    embedder: Embedder | None,
    settings: IndexSettings,
) -> KGIndex:
    """The index of ``corpus`` from the :class:`IndexPart` of each run of its passages, in corpus order: the
    global work (vocabularies, triples, synonym edges, question links, passage maps, manifest).

    The result depends on the parts only through their passages' extractions and phrase vectors, so one part
    and any split of the corpus give the same index (up to the float rounding of embedding a phrase in
    another batch). ``embedder`` (of ``settings.embed_model``, or None) embeds the question mentions.
    """
    t0 = time.perf_counter()
    qa = list(questions)
    if [p for part in parts for p in part.passage_ids] != corpus.ids:
        raise ValueError("the parts do not cover the corpus's passages once each, in corpus order")
    per_passage = [x for part in parts for x in part.per_passage]
    report: dict[str, int] = {}
    for part in parts:
        for key, n in part.report.items():
            report[key] = report.get(key, 0) + n
    timings = {stage: sum(part.timings[stage] for part in parts) for stage in ("extract", "embed_entities")}

    entities = sorted(set().union(*(part.phrases for part in parts)))
    entity_id = {e: i for i, e in enumerate(entities)}
    relations = sorted({t[1] for _, triples in per_passage for t in triples} | {SYNONYM_RELATION})
    relation_id = {r: i for i, r in enumerate(relations)}
    extracted = {(entity_id[h], relation_id[r], entity_id[t]) for _, triples in per_passage for h, r, t in triples}
    emb = _entity_embeddings(parts, entity_id) if embedder is not None else None

    t1 = time.perf_counter()
    synonyms: set[tuple[int, int, int]] = set()
    if emb is not None and settings.synonym_top_k > 0 and len(entities):
        eligible = np.array([alnum_count(e) >= settings.synonym_min_chars for e in entities])
        groups = number_groups(entities) if settings.synonym_same_numbers else None
        threshold, top_k, exact_max = settings.synonym_threshold, settings.synonym_top_k, settings.synonym_exact_max
        pairs, _ = synonym_pairs(emb, threshold, top_k, eligible, groups, exact_max=exact_max)
        eq = relation_id[SYNONYM_RELATION]
        synonyms = {(int(i), eq, int(j)) for i, j in pairs} - extracted
    timings["synonyms"] = time.perf_counter() - t1
    triples = np.array(sorted(extracted | synonyms), dtype=np.int64).reshape(-1, 3)

    t1 = time.perf_counter()
    question_links = {}
    if qa and entities:
        mentions = question_mentions(qa, settings.spacy_model)
        encode = partial(embedder.encode, stage="embedding question mentions") if embedder is not None else None
        links = link_mentions(mentions, entities, emb, encode, settings.link_min_score, settings.link_fallback)
        question_links = {q.id: ls for q, ls in zip(qa, links, strict=True)}
    timings["link_questions"] = time.perf_counter() - t1
    timings["total"] = timings["extract"] + timings["embed_entities"] + time.perf_counter() - t0

    entity_passages = _entity_passages(per_passage, entity_id, len(corpus))
    passage_facts = _passage_facts(per_passage, entity_id, relation_id, triples)
    counts = {
        "entities": len(entities),
        "relations": len(relations),
        "triples": len(triples),
        "extracted_triples": len(extracted),
        "synonym_edges": len(synonyms),
        "passages": len(corpus),
        "passages_without_entities": int((np.diff(entity_passages.tocsc().indptr) == 0).sum()),
        "questions": len(qa),
        "questions_linked": sum(bool(ls) for ls in question_links.values()),
        "questions_fallback_linked": sum(  # linked only through the fallback: every link below link_min_score
            bool(ls) and all(link.score < settings.link_min_score for link in ls) for ls in question_links.values()
        ),
    }
    manifest = expected_manifest(corpus, qa, extractor, settings) | _jsonable(
        {
            "embedder": embedder.model_name if embedder is not None else None,
            "counts": counts,
            "extraction_report": report,
            "shards": len(parts),
            "timings_s": {k: round(v, 3) for k, v in timings.items()},
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
    )
    return KGIndex(
        entities, relations, triples, corpus.ids, entity_passages, emb, question_links, manifest, passage_facts
    )
