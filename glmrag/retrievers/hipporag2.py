"""HippoRAG 2's retrieval without its LLM recognition-memory filter (``retriever=hipporag2``).

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory", arXiv 2502.14802, §3) links a question to the
graph through *facts* (query-to-triple similarity), adds the passages themselves as graph nodes seeded by
their dense score, and ranks passages by the PPR mass of their nodes. This module follows the released code,
OSU-NLP-Group/HippoRAG branch ``main`` (commit c617143: ``src/hipporag/HippoRAG.py``, defaults in
``src/hipporag/utils/config_utils.py``), without ``rerank_facts``'s LLM filter: the top ``linking_top_k``
facts by similarity are kept, the paper's "w/o filter" ablation (Table 5). Point by point:

- **Nodes**: every fact head and tail (``extract_entity_nodes``) and every passage (``add_new_nodes``).
- **Fact edges** (``add_fact_edges``): each statement of a fact in a passage adds 1 under both directed keys
  ``(h, t)`` and ``(t, h)``; self-loops are dropped (``add_new_edges``). Relations are ignored.
- **Passage edges** (``add_passage_edges``): key ``(passage, phrase)`` = 1.0 for every head or tail of the
  passage's facts, one key only.
- **Synonym edges** (``add_synonymy_edges``): every phrase with more than two ASCII letters or digits gets
  its (at most 101) nearest other phrases of cosine >= 0.8; the cosine is *assigned* to the key ``(a, b)``,
  replacing a fact count there (it runs after ``add_fact_edges``).
- **The walk** is igraph's undirected PPR (``run_ppr``: ``directed=False``, ``is_directed_graph`` False): the
  weight of a pair is the sum of its keys, so a fact stated once weighs 2, a passage edge 1, a mutual synonym
  2 x cosine.
- **Facts** are embedded as ``str((head, relation, tail))``, Python's tuple text (``index``:
  ``fact_embedding_store.insert_strings([str(fact) ...])``); a fact is a distinct triple stated somewhere.
- **Fact scores** (``get_fact_scores``): question . fact cosines, min-max normalised over all facts (all
  ones when they are equal); the top ``linking_top_k`` facts are kept.
- **Phrase seeds** (``graph_search_with_fact_entities``): each head and tail of a kept fact receives
  ``fact score / |passages with a fact on the phrase|``; a phrase's seed is the *mean* over its occurrences
  (``phrase_weights / number_of_occurs``), and only the ``linking_top_k`` best phrases keep theirs
  (``get_top_k_weights``).
- **Passage seeds**: the min-max normalised question . passage cosine x ``passage_node_weight``, for every
  passage (``dense_passage_retrieval``).
- **PPR** from the sum of both seed vectors (igraph normalises the reset), damping 0.5; passages are ranked by
  their node's PPR probability, which is the score returned.
- **No fact**: when the index states no fact, ``rerank_facts`` returns none and ``retrieve`` falls back to dense
  passage retrieval (min-max normalised cosines). Without the filter this is the only empty case.

Deliberate differences (docs/fidelity.md): phrases are glmrag's normalised entities (HippoRAG 2 keeps
``[A-Za-z0-9 ]`` of the lower-cased text); questions are embedded without NV-Embed-v2's query instructions
(the index's embedder, MiniLM by default, has none); ties (facts, phrases, passages of equal score) go to the
lower id, where HippoRAG 2's ``argsort(...)[::-1]`` and set iteration order are arbitrary or reversed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, Question
from glmrag.graph.pagerank import Walk, personalized_pagerank, transition
from glmrag.index.embed import Embedder, passage_matrix
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, top_k_stable
from glmrag.retrievers.base import Ranking
from glmrag.retrievers.hipporag import TOLERANCE, min_max, phrase_keys

log = logging.getLogger(__name__)

LINKING_TOP_K = 5
"""Facts kept per question, and phrases seeded: ``config_utils.py`` ``linking_top_k`` default 5."""
PASSAGE_NODE_WEIGHT = 0.05
"""Passage seeds = normalised dense score x 0.05: ``config_utils.py`` ``passage_node_weight`` default 0.05."""
DAMPING = 0.5
"""PPR damping (probability of following an edge): ``config_utils.py`` ``damping`` default 0.5."""
SYNONYM_THRESHOLD = 0.8
"""Synonym edges of cosine >= 0.8: ``config_utils.py`` ``synonymy_edge_sim_threshold`` default 0.8."""
SYNONYM_MAX = 101
"""At most 101 synonyms per phrase: ``add_synonymy_edges`` breaks once more than 100 were accepted (its
``synonymy_edge_topk`` 2047 neighbours, self included, never bind first)."""


@dataclass(frozen=True)
class Hippo2Graph:
    """HippoRAG 2's graph of one index: entity ``e`` is node ``e``, passage ``p`` is node ``E + p``."""

    walk: Walk
    """Over ``E + P`` nodes; entities that head or tail no fact are isolated and never seeded."""
    facts: np.ndarray
    """(F,) int64 rows of ``index.triples`` that are facts: stated by some passage, one row per distinct text."""
    fact_texts: list[str]
    """(F,) ``str((head, relation, tail))``, the text HippoRAG 2 embeds a fact as."""
    passage_count: np.ndarray
    """(E,) passages with a fact that has the entity as head or tail (``ent_node_to_chunk_ids``)."""


def hipporag2_graph(
    index: KGIndex, threshold: float = SYNONYM_THRESHOLD, max_synonyms: int = SYNONYM_MAX
) -> Hippo2Graph:
    """Build HippoRAG 2's phrase + passage graph from the index's per-passage facts and entity embeddings."""
    phrases = phrase_keys(index, threshold, max_synonyms, method="hipporag2")
    p = index.num_passages
    keys, stated = phrases.keys, phrases.stated
    passage_phrases = phrases.passage_phrases.copy()  # (P, E) > 0: a phrase of p's facts
    passage_phrases.data[:] = 1.0  # add_passage_edges assigns 1.0 once per (passage, phrase)
    passage_count = np.asarray(passage_phrases.sum(axis=0)).ravel()  # (E,)

    # (E+P, E+P) keys: phrase -> phrase, and passage -> phrase (add_passage_edges' one direction)
    block = sp.bmat([[keys.tocsr(), None], [passage_phrases, sp.csr_matrix((p, p))]], format="csr")
    block.eliminate_zeros()
    walk = Walk(*transition(block + block.T))  # igraph's undirected walk sums both keys of a pair

    texts = [str((index.entities[h], index.relations[r], index.entities[t])) for h, r, t in index.triples[stated]]
    distinct: dict[str, int] = {}
    for i, text in enumerate(texts):
        distinct.setdefault(text, i)  # flatten_facts keeps one fact per distinct text
    keep = np.array(sorted(distinct.values()), dtype=np.int64)
    return Hippo2Graph(walk, stated[keep], [texts[i] for i in keep], passage_count)


class HippoRAG2Retriever:
    """HippoRAG 2's fact-linked PPR over phrases and passages, without the LLM filter; see the module docstring.

    ``embed_model`` (None: the index's own ``embedder``) embeds questions, facts and passages; passage
    embeddings are cached under ``cache_dir`` as dense retrieval caches them (the same file), fact embeddings
    in the phrase cache under ``fact_cache_dir`` (:mod:`glmrag.index.embed_cache`; None: none), which spares a
    rerun the first call's fact embedding (about 8 minutes for the 2Wiki test set's facts on two CPU cores).
    """

    name = "hipporag2"

    def __init__(
        self,
        linking_top_k: int = LINKING_TOP_K,
        passage_node_weight: float = PASSAGE_NODE_WEIGHT,
        damping: float = DAMPING,
        tol: float = TOLERANCE,
        synonym_threshold: float = SYNONYM_THRESHOLD,
        max_synonyms: int = SYNONYM_MAX,
        embed_model: str | None = None,
        cache_dir: str | Path | None = None,
        fact_cache_dir: str | Path | None = None,
        batch_size: int = 128,
        top_entities: int = 100,
        encoder=None,
    ) -> None:
        """``encoder`` (``model_name`` and ``encode(texts, stage=..., unit=...)`` -> unit rows) stands in for the
        embedder in tests."""
        if linking_top_k < 1:
            raise ValueError(f"linking_top_k={linking_top_k} must be >= 1 (0 facts would always fall back to dense)")
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping={damping} must be in [0, 1)")
        if passage_node_weight < 0 or max_synonyms < 0:
            raise ValueError(f"passage_node_weight={passage_node_weight} and max_synonyms={max_synonyms} must be >= 0")
        self.linking_top_k, self.passage_node_weight = linking_top_k, passage_node_weight
        self.damping, self.tol = damping, tol
        self.synonym_threshold, self.max_synonyms = synonym_threshold, max_synonyms
        self.embed_model = embed_model
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.fact_cache_dir = Path(fact_cache_dir) if fact_cache_dir is not None else None
        self.batch_size, self.top_entities = batch_size, top_entities
        self.encoder = encoder
        self._cache: tuple[KGIndex, Hippo2Graph, np.ndarray] | None = None
        self._passages: tuple[str, np.ndarray] | None = None
        self.fallbacks = 0
        """Questions of the last :meth:`retrieve` ranked by dense retrieval because the index has no fact."""

    def _encoder(self, index: KGIndex):
        if self.encoder is None:
            model = self.embed_model or index.manifest.get("embedder")
            if not model:
                raise ValueError("retriever=hipporag2: the index names no embedder; set retriever.embed_model")
            self.encoder = Embedder(model, cache_dir=self.fact_cache_dir)
        return self.encoder

    def prepare(self, index: KGIndex) -> tuple[Hippo2Graph, np.ndarray]:
        """The graph and the fact embeddings ((F, d) unit rows) of ``index``, built once per index."""
        if self._cache is None or self._cache[0] is not index:
            graph = hipporag2_graph(index, self.synonym_threshold, self.max_synonyms)
            encoder = self._encoder(index)
            log.info(
                "hipporag2: embedding the %d facts of the whole corpus, whatever data.limit keeps (HippoRAG 2 links "
                "a question to any fact; about 4 ms a fact on a 2-core CPU, once: cached under %s)",
                len(graph.fact_texts),
                self.fact_cache_dir or "nothing (fact_cache_dir is null)",
            )
            facts = encoder.encode(graph.fact_texts, stage="hipporag2: fact embedding", unit="fact")
            self._cache = (index, graph, np.asarray(facts))
        return self._cache[1], self._cache[2]

    def passage_embeddings(self, index: KGIndex, corpus: Corpus) -> np.ndarray:
        """(P, d) unit rows in the index's passage order (the passage nodes' order)."""
        if corpus is None:
            raise ValueError("retriever=hipporag2 seeds passage nodes by dense scores and needs the corpus")
        key = corpus.content_hash()
        if self._passages is None or self._passages[0] != key:
            matrix = passage_matrix(corpus, self._encoder(index), self.cache_dir, "hipporag2: passage embedding")
            missing = [pid for pid in index.passage_ids if pid not in corpus]
            if missing:
                raise ValueError(
                    f"retriever=hipporag2: {len(missing)} index passages (e.g. {missing[0]}) are not in the corpus"
                )
            self._passages = (key, matrix[[corpus.position(pid) for pid in index.passage_ids]])
        return self._passages[1]

    def restart(self, queries: np.ndarray, index: KGIndex, passages: np.ndarray) -> np.ndarray:
        """Unnormalised seeds: phrase seeds on rows ``:E``, passage seeds on rows ``E:``.

        Shapes: ``queries`` (B, d), ``passages`` (P, d) -> (E + P, B) float64.
        """
        graph, facts = self.prepare(index)
        n, b = index.num_entities, len(queries)
        scores = min_max(queries @ facts.T)  # (B, F)
        chosen, values = top_k_stable(scores, self.linking_top_k)  # (B, k)
        total, occurs = np.zeros((b, n)), np.zeros((b, n))
        rows = np.repeat(np.arange(b), chosen.shape[1])
        for column in (0, 2):  # head, then tail; a fact whose head is its tail counts twice, as in the code
            phrases = index.triples[graph.facts[chosen], column].ravel()  # (B * k,)
            np.add.at(total, (rows, phrases), values.ravel() / graph.passage_count[phrases])
            np.add.at(occurs, (rows, phrases), 1.0)
        mean = np.divide(total, occurs, out=np.zeros_like(total), where=occurs > 0)  # (B, E)
        ranked, _ = top_k_stable(np.where(occurs > 0, mean, -np.inf), self.linking_top_k)
        phrase_seeds = np.zeros_like(mean)
        keep = np.take_along_axis(occurs, ranked, axis=1) > 0
        batch = np.broadcast_to(np.arange(b)[:, None], ranked.shape)
        phrase_seeds[batch[keep], ranked[keep]] = mean[batch[keep], ranked[keep]]
        passage_seeds = min_max(queries @ passages.T) * self.passage_node_weight  # (B, P)
        return np.concatenate([phrase_seeds, passage_seeds], axis=1).T

    def retrieve(
        self, questions: Sequence[Question], index: KGIndex, corpus: Corpus | None = None, top_k: int = 10
    ) -> list[Ranking]:
        """Rank passages by their node's PPR probability; also the top entities by PPR.

        Without any fact in the index, passages are ranked by min-max normalised dense scores.
        """
        graph, facts = self.prepare(index)
        passages = self.passage_embeddings(index, corpus)
        encoder, n = self._encoder(index), index.num_entities
        self.fallbacks = 0
        rankings: list[Ranking] = []
        for start in range(0, len(questions), self.batch_size):
            batch = questions[start : start + self.batch_size]
            queries = np.asarray(
                encoder.encode([q.question for q in batch], stage="hipporag2: questions", unit="question")
            )
            if len(facts) == 0:  # rerank_facts finds no fact: retrieve() returns dense_passage_retrieval
                self.fallbacks += len(batch)
                positions, values = top_k_stable(min_max(queries @ passages.T), top_k)
                rankings += make_rankings([q.id for q in batch], index.passage_ids, positions, values)
                continue
            restart = self.restart(queries, index, passages)  # (E + P, B)
            restart /= restart.sum(axis=0, keepdims=True)  # igraph normalises the reset vector
            ppr = personalized_pagerank(graph.walk, restart, self.damping, self.tol)  # (E + P, B)
            positions, values = top_k_stable(ppr[n:].T, top_k)
            entities, entity_values = top_k_stable(ppr[:n].T, self.top_entities)
            rankings += make_rankings(
                [q.id for q in batch], index.passage_ids, positions, values, entities, entity_values
            )
        if self.fallbacks:
            log.warning("HippoRAG 2: the index states no fact; %d questions ranked by dense retrieval", self.fallbacks)
        return rankings
