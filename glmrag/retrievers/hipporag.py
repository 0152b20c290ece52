"""HippoRAG's retrieval as its released code computes it (``retriever=hipporag``).

HippoRAG (Gutiérrez et al., 2024, §2.2) runs Personalized PageRank from the question's entities over a
graph of OpenIE phrases and scores passages by the PPR mass of their facts. This module follows the
released code, OSU-NLP-Group/HippoRAG branch ``legacy`` (commit b144c46: ``src/create_graph.py`` builds
the graph, ``src/hipporag.py`` retrieves), with the settings of the paper's main experiments
(``src/run_hipporag_main_exps.sh``: damping 0.5, synonym threshold 0.8, node specificity, no document
ensemble). Point by point, against glmrag's :mod:`glmrag.retrievers.ppr`:

- **Nodes** are the heads and tails of extracted facts; NER-only entities are not nodes and are never linked.
- **Fact edges** weigh the number of times any fact joining the two phrases is stated (every occurrence, in
  either orientation, under both directed keys); relations are ignored and self-loops are dropped.
- **Synonym edges**: every node with more than two ASCII letters or digits gets its (at most 101) nearest
  other nodes of cosine >= 0.8 in the entity embeddings, each edge weighing its cosine. The cosine is
  *assigned* to the directed key, replacing the fact count there (``create_graph.py``); the walk reads the
  undirected sum of both keys, as igraph does with HippoRAG's parallel edges.
- **Node specificity**: a seed weighs ``1 / |passages with a fact that has the phrase as head or tail|``.
- **Linking**: each question mention (the same spaCy mentions the index links) goes to its one nearest
  node by cosine, with no threshold; two mentions of one node give it one weight, not two.
- **PPR** is :func:`glmrag.graph.pagerank.personalized_pagerank` in float64 to ``tol`` 1e-10 in L1
  (HippoRAG: igraph's PRPACK, to 1e-10); the tests compare it with igraph.
- **Passage scores**: the sum over the passage's distinct facts of head + tail PPR (docs -> facts -> phrases),
  min-max normalised over the corpus; a question with no linked node gets uniform scores.

Deliberate differences (docs/fidelity.md): phrases are glmrag's normalised entities (Unicode letters kept,
inner spaces collapsed; HippoRAG keeps ASCII only); node vectors are not truncated to 20 tokens; among equal
scores the earlier passage ranks first (HippoRAG's reversed stable sort puts the later one first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, Question
from glmrag.graph.pagerank import HIPPORAG_DAMPING, Walk, personalized_pagerank, transition
from glmrag.index.embed import Embedder
from glmrag.index.kg import KGIndex
from glmrag.index.normalize import normalize_phrase
from glmrag.index.ranking import make_rankings, top_k_stable
from glmrag.index.resolve import nearest, question_mentions, synonym_pairs
from glmrag.retrievers.base import Ranking

log = logging.getLogger(__name__)

SYNONYM_THRESHOLD = 0.8
"""HippoRAG's synonym edges: cosine >= 0.8 (``setup_hipporag_main_exps.sh``, ``--threshold 0.8``)."""
SYNONYM_MAX = 101
"""At most 101 synonyms per phrase: ``create_graph.py`` stops once more than 100 were accepted."""
SYNONYM_MIN_ALNUM = 3
"""Only phrases with more than two ASCII letters or digits get synonym edges (``create_graph.py``)."""
TOLERANCE = 1e-10
"""PRPACK's tolerance in HippoRAG's igraph call, here the L1 bound of the power iteration."""


@dataclass(frozen=True)
class HippoGraph:
    """HippoRAG's phrase graph of one index: the walk, the passage -> phrase map and the seed weights."""

    walk: Walk
    nodes: np.ndarray
    """(N,) int64 entity ids that are graph nodes (fact heads and tails), ascending."""
    passage_phrases: sp.csr_matrix
    """(P, E) how many distinct facts of passage p have entity e as head or tail (docs -> facts -> phrases)."""
    specificity: np.ndarray
    """(E,) ``1 / |passages with a fact on e|`` (1 where there is none, as HippoRAG's fallback)."""


def ascii_alnum(phrase: str) -> int:
    """The letters and digits of ``phrase`` that HippoRAG's ``[^A-Za-z0-9]`` filter keeps."""
    return sum(ch.isascii() and ch.isalnum() for ch in phrase)


@dataclass(frozen=True)
class PhraseKeys:
    """The phrase graph both HippoRAGs build from an index's facts, before the walk reads it."""

    keys: sp.csr_matrix
    """(E, E) directed keys: fact statements under ``(h, t)`` and ``(t, h)``, synonym cosines assigned over them,
    no self-loops. igraph's undirected walk reads ``keys + keys.T``."""
    nodes: np.ndarray
    """(N,) int64 entity ids that are graph nodes (fact heads and tails), ascending."""
    stated: np.ndarray
    """(T',) rows of ``index.triples`` that some passage states (synonym rows are stated by none)."""
    passage_phrases: sp.csr_matrix
    """(P, E) how many distinct facts of passage p have entity e as head or tail (docs -> facts -> phrases)."""


def phrase_keys(index: KGIndex, threshold: float, max_synonyms: int, method: str = "hipporag") -> PhraseKeys:
    """HippoRAG's fact and synonym keys (``create_graph.py``; HippoRAG 2's ``add_fact_edges`` and
    ``add_synonymy_edges`` compute the same) from the index's per-passage facts and entity embeddings."""
    if index.passage_facts is None or index.entity_embeddings is None:
        raise ValueError(
            f"retriever={method} needs an index built from per-passage extractions with entity embeddings "
            "(passage_facts and entity_embeddings); this one has "
            f"passage_facts={'yes' if index.passage_facts is not None else 'no'}, "
            f"embeddings={'yes' if index.entity_embeddings is not None else 'no'}: rebuild it with "
            "glmrag.index.build.build_index (a GFM-RAG import or a synthetic graph has no passage facts)"
        )
    n = index.num_entities
    occurrences = np.asarray(index.passage_facts.sum(axis=0)).ravel()  # (T,) times each fact is stated
    stated = np.flatnonzero(occurrences > 0)
    heads, tails, weight = index.triples[stated, 0], index.triples[stated, 2], occurrences[stated]
    keys = sp.coo_matrix((np.r_[weight, weight], (np.r_[heads, tails], np.r_[tails, heads])), (n, n))
    keys = keys.tocsr().tolil()  # (E, E): (h, t) and (t, h) both count every statement
    keys.setdiag(0.0)  # self-loops are dropped when the igraph graph is built
    nodes = np.unique(np.r_[heads, tails])
    eligible = np.array([ascii_alnum(index.entities[e]) >= SYNONYM_MIN_ALNUM for e in nodes], dtype=bool)
    pairs, cosines = synonym_pairs(index.entity_embeddings[nodes], threshold, max_synonyms, eligible)
    keys[nodes[pairs[:, 0]], nodes[pairs[:, 1]]] = cosines.astype(np.float64)  # assigned: replaces a fact count
    keys = keys.tocsr()
    keys.eliminate_zeros()
    rows = np.arange(len(stated))
    fact_phrases = sp.csr_matrix((np.ones(2 * len(stated)), (np.r_[rows, rows], np.r_[heads, tails])), (len(stated), n))
    fact_phrases.data[:] = 1.0  # (T', E) a fact's head and tail, one entry when they are equal
    distinct = index.passage_facts[:, stated].copy()
    distinct.data[:] = 1.0  # a fact a passage states twice counts once
    return PhraseKeys(keys, nodes, stated, (distinct @ fact_phrases).tocsr())


def min_max(scores: np.ndarray) -> np.ndarray:
    """Row-wise ``(x - min) / (max - min)``, and ones for a constant row (both HippoRAGs' ``min_max_normalize``;
    HippoRAG's divides by zero there, HippoRAG 2's gives ones).

    Shapes: (B, N) -> (B, N) float64.
    """
    scores = np.asarray(scores, dtype=np.float64)
    low, high = scores.min(axis=1, keepdims=True), scores.max(axis=1, keepdims=True)
    span = high - low
    return np.where(span > 0, (scores - low) / np.where(span > 0, span, 1.0), 1.0)


def hipporag_graph(index: KGIndex, threshold: float = SYNONYM_THRESHOLD, max_synonyms: int = SYNONYM_MAX) -> HippoGraph:
    """Build HippoRAG's graph from the index's per-passage facts and entity embeddings."""
    phrases = phrase_keys(index, threshold, max_synonyms)
    walk = Walk(*transition(phrases.keys + phrases.keys.T))  # igraph sums HippoRAG's parallel undirected edges
    documents = np.asarray((phrases.passage_phrases > 0).sum(axis=0)).ravel()
    specificity = np.where(documents > 0, 1.0 / np.maximum(documents, 1), 1.0)
    return HippoGraph(walk, phrases.nodes, phrases.passage_phrases, specificity)


class HippoRAGRetriever:
    """HippoRAG's PPR retrieval (legacy code, main-experiment settings); see the module docstring.

    ``embed_model`` (None: the index's own ``embedder``) embeds the question mentions, found with the
    index's spaCy pipeline (``spacy_model`` None: the one of the index's settings). The graph is built
    once per index.
    """

    name = "hipporag"

    def __init__(
        self,
        damping: float = HIPPORAG_DAMPING,
        tol: float = TOLERANCE,
        synonym_threshold: float = SYNONYM_THRESHOLD,
        max_synonyms: int = SYNONYM_MAX,
        embed_model: str | None = None,
        spacy_model: str | None = None,
        batch_size: int = 128,
        top_entities: int = 100,
        encoder=None,
        mentions: Callable[[Sequence[Question]], list[list[str]]] | None = None,
    ) -> None:
        """``encoder`` (texts -> unit rows) and ``mentions`` (questions -> mention lists) stand in for the
        embedder and spaCy in tests."""
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping={damping} must be in [0, 1)")
        if max_synonyms < 0:
            raise ValueError(f"max_synonyms={max_synonyms} must be >= 0")
        self.damping, self.tol = damping, tol
        self.synonym_threshold, self.max_synonyms = synonym_threshold, max_synonyms
        self.embed_model, self.spacy_model = embed_model, spacy_model
        self.batch_size, self.top_entities = batch_size, top_entities
        self.encoder, self.mentions = encoder, mentions
        self._cache: tuple[KGIndex, HippoGraph] | None = None
        self.fallbacks = 0
        """Questions of the last :meth:`retrieve` with no linked node (uniform passage scores)."""

    def prepare(self, index: KGIndex) -> HippoGraph:
        if self._cache is None or self._cache[0] is not index:
            self._cache = (index, hipporag_graph(index, self.synonym_threshold, self.max_synonyms))
        return self._cache[1]

    def _encoder(self, index: KGIndex):
        if self.encoder is None:
            model = self.embed_model or index.manifest.get("embedder")
            if not model:
                raise ValueError("retriever=hipporag: the index names no embedder; set retriever.embed_model")
            self.encoder = Embedder(model)
        return self.encoder

    def _mentions(self, questions: Sequence[Question], index: KGIndex) -> list[list[str]]:
        if self.mentions is not None:
            return self.mentions(questions)
        settings = index.manifest.get("settings", {})
        return question_mentions(questions, self.spacy_model or settings.get("spacy_model", "en_core_web_sm"))

    def restart(self, questions: Sequence[Question], index: KGIndex) -> tuple[np.ndarray, np.ndarray]:
        """Seed weights (each linked node's specificity, once per node), normalised; and which had none.

        Shapes: -> (E, B) float64 columns summing to 1 (zero columns for questions without a seed), (B,) bool.
        """
        graph = self.prepare(index)
        mentions = self._mentions(questions, index)
        flat = [normalize_phrase(m) or m for ms in mentions for m in ms]
        linked = np.zeros(0, dtype=np.int64)
        if flat:
            best, _ = nearest(self._encoder(index).encode(flat), index.entity_embeddings[graph.nodes])
            linked = graph.nodes[best]
        restart = np.zeros((index.num_entities, len(questions)))
        cuts = np.cumsum([0, *map(len, mentions)])
        for b in range(len(questions)):
            seeds = np.unique(linked[cuts[b] : cuts[b + 1]])
            restart[seeds, b] = graph.specificity[seeds]  # assigned per node, as hipporag.py does
        total = restart.sum(axis=0)
        empty = total <= 0
        restart[:, ~empty] /= total[~empty]
        return restart, empty

    def retrieve(
        self, questions: Sequence[Question], index: KGIndex, corpus: Corpus | None = None, top_k: int = 10
    ) -> list[Ranking]:
        """Rank passages by HippoRAG's fact-mass score (min-max normalised); also the top entities by PPR."""
        graph = self.prepare(index)
        self.fallbacks = 0
        rankings: list[Ranking] = []
        for start in range(0, len(questions), self.batch_size):
            batch = questions[start : start + self.batch_size]
            restart, empty = self.restart(batch, index)
            ppr = np.zeros_like(restart)
            if (~empty).any():
                ppr[:, ~empty] = personalized_pagerank(graph.walk, restart[:, ~empty], self.damping, self.tol)
            passages = min_max(np.asarray(graph.passage_phrases @ ppr).T)  # (B, P)
            passages[empty] = 1.0 / index.num_passages
            self.fallbacks += int(empty.sum())
            positions, values = top_k_stable(passages, top_k)
            entities, entity_values = top_k_stable(ppr.T, self.top_entities)
            rankings += make_rankings(
                [q.id for q in batch], index.passage_ids, positions, values, entities, entity_values
            )
        if self.fallbacks:
            log.warning(
                "HippoRAG: %d of %d questions link no graph node; their passage scores are uniform",
                self.fallbacks,
                len(questions),
            )
        return rankings
