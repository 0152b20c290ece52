"""HippoRAG 2's retrieval (``retriever=hipporag2``; with its LLM recognition filter: ``hipporag2_filter``).

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory", arXiv 2502.14802, §3) links a question to the
graph through *facts* (query-to-triple similarity), adds the passages themselves as graph nodes seeded by
their dense score, and ranks passages by the PPR mass of their nodes. This module follows the released code,
OSU-NLP-Group/HippoRAG branch ``main`` (commit c617143: ``src/hipporag/HippoRAG.py``, defaults in
``src/hipporag/utils/config_utils.py``). By default without ``rerank_facts``'s LLM filter: the top
``linking_top_k`` facts by similarity are kept, the paper's "w/o filter" ablation (Table 5); with
``recognition_filter`` an LLM keeps some of them first (:mod:`glmrag.retrievers.hipporag2_filter`).
Point by point:

- **Nodes**: every fact head and tail (``extract_entity_nodes``) and every passage (``add_new_nodes``).
- **Fact edges** (``add_fact_edges``): each passage that states a fact adds 1 under both directed keys
  ``(h, t)`` and ``(t, h)``, once however often it states it (``reformat_openie_results`` keeps one of a
  passage's repeated triples, ``filter_invalid_triples``); self-loops are dropped (``add_new_edges``).
  Relations are ignored.
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
- **No fact**: when the index states no fact, or the recognition filter keeps none, ``retrieve`` ranks the
  question's passages by dense retrieval (min-max normalised cosines).

Deliberate differences (docs/fidelity.md): phrases are glmrag's normalised entities (HippoRAG 2 keeps
``[A-Za-z0-9 ]`` of the lower-cased text); questions are embedded without NV-Embed-v2's query instructions
(the index's embedder, MiniLM by default, has none); ties (facts, phrases, passages of equal score) go to the
lower id, where HippoRAG 2's ``argsort(...)[::-1]`` and set iteration order are arbitrary or reversed; a
passage's repeated fact counts once after normalisation (HippoRAG 2: once per distinct raw triple, the same
unless two spellings of one passage normalise alike); a triple with a part that normalises to nothing is not in
the index (HippoRAG 2 keeps ``''`` as a node). Checked beside the authors' code on MuSiQue-100:
``benchmarks/hipporag2_side_by_side.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, Question
from glmrag.graph.pagerank import Walk, personalized_pagerank, transition
from glmrag.index.embed import Embedder, passage_matrix
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, top_k_stable
from glmrag.llm.base import LLM, Usage
from glmrag.retrievers.base import Ranking
from glmrag.retrievers.hipporag import TOLERANCE, min_max, phrase_keys
from glmrag.retrievers.hipporag2_filter import MAX_NEW_TOKENS, RecognitionFilter

log = logging.getLogger(__name__)

REPLY_SHOWN = 400
"""Characters of the recognition filter's reply kept in a question's trace."""

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
    weights: sp.csr_matrix
    """(E + P, E + P) symmetric: the undirected weight of each pair, the sum of its two keys (what the walk reads)."""
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
    if index.passage_facts is not None:
        once = index.passage_facts.copy()
        once.data[:] = 1.0  # (P, T) reformat_openie_results drops a passage's repeated triples
        index = replace(index, passage_facts=once)
    phrases = phrase_keys(index, threshold, max_synonyms, method="hipporag2")
    p = index.num_passages
    keys, stated = phrases.keys, phrases.stated
    passage_phrases = phrases.passage_phrases.copy()  # (P, E) > 0: a phrase of p's facts
    passage_phrases.data[:] = 1.0  # add_passage_edges assigns 1.0 once per (passage, phrase)
    passage_count = np.asarray(passage_phrases.sum(axis=0)).ravel()  # (E,)

    # (E+P, E+P) keys: phrase -> phrase, and passage -> phrase (add_passage_edges' one direction)
    block = sp.bmat([[keys.tocsr(), None], [passage_phrases, sp.csr_matrix((p, p))]], format="csr")
    block.eliminate_zeros()
    weights = (block + block.T).tocsr()  # igraph's undirected walk sums both keys of a pair
    walk = Walk(*transition(weights))

    texts = [str((index.entities[h], index.relations[r], index.entities[t])) for h, r, t in index.triples[stated]]
    distinct: dict[str, int] = {}
    for i, text in enumerate(texts):
        distinct.setdefault(text, i)  # flatten_facts keeps one fact per distinct text
    keep = np.array(sorted(distinct.values()), dtype=np.int64)
    return Hippo2Graph(walk, weights, stated[keep], [texts[i] for i in keep], passage_count)


class HippoRAG2Retriever:
    """HippoRAG 2's fact-linked PPR over phrases and passages; see the module docstring.

    ``embed_model`` (None: the index's own ``embedder``) embeds questions, facts and passages; passage
    embeddings are cached under ``cache_dir`` as dense retrieval caches them (the same file), fact embeddings
    in the phrase cache under ``fact_cache_dir`` (:mod:`glmrag.index.embed_cache`; None: none), which spares a
    rerun the first call's fact embedding (about 8 minutes for the 2Wiki test set's facts on two CPU cores).
    ``recognition_filter`` asks ``llm`` which linked facts to keep (:mod:`glmrag.retrievers.hipporag2_filter`);
    its calls are counted per question under the tag ``name`` (:meth:`llm_cost`).
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
        recognition_filter: bool = False,
        llm: LLM | None = None,
        filter_max_new_tokens: int = MAX_NEW_TOKENS,
        name: str = "hipporag2",
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
        if recognition_filter and llm is None:
            raise ValueError(
                "recognition_filter=true needs an LLM: use retriever=hipporag2_filter (configs/retriever/"
                "hipporag2_filter.yaml, the offline SmolLM2) or add +llm@retriever.hipporag2.llm=local"
            )
        self.linking_top_k, self.passage_node_weight = linking_top_k, passage_node_weight
        self.damping, self.tol = damping, tol
        self.synonym_threshold, self.max_synonyms = synonym_threshold, max_synonyms
        self.embed_model = embed_model
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.fact_cache_dir = Path(fact_cache_dir) if fact_cache_dir is not None else None
        self.batch_size, self.top_entities = batch_size, top_entities
        self.name = name
        self.llm = llm
        self.filter = RecognitionFilter(llm, linking_top_k, filter_max_new_tokens, name) if recognition_filter else None
        self.encoder = encoder
        self._cache: tuple[KGIndex, Hippo2Graph, np.ndarray] | None = None
        self._passages: tuple[str, np.ndarray] | None = None
        self._traces: dict[str, dict] = {}
        self._cost: dict[str, Usage] = {}
        self.fallbacks = 0
        """Questions of the last :meth:`retrieve` ranked by dense retrieval: the index has no fact, or the
        recognition filter kept none."""

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

    def linked_facts(self, queries: np.ndarray, index: KGIndex) -> tuple[np.ndarray, np.ndarray]:
        """The ``linking_top_k`` facts of highest min-max normalised query . fact cosine, best first.

        Shapes: ``queries`` (B, d) -> fact positions (B, k) into ``graph.facts``, their scores (B, k).
        """
        _, facts = self.prepare(index)
        return top_k_stable(min_max(queries @ facts.T), self.linking_top_k)

    def phrase_seeds(self, index: KGIndex, facts: Sequence[np.ndarray], scores: Sequence[np.ndarray]) -> np.ndarray:
        """Each question's phrase seeds from its seeding facts (``graph_search_with_fact_entities``): a head or
        tail gets fact score / its passages, the mean over its occurrences, and the best ``linking_top_k``
        phrases keep theirs. ``facts[b]`` are positions into ``graph.facts`` (a repeat counts twice).

        Shapes: B arrays of (k_b,) -> (B, E) float64.
        """
        graph, _ = self.prepare(index)
        b, n = len(facts), index.num_entities
        total, occurs = np.zeros((b, n)), np.zeros((b, n))
        rows = np.repeat(np.arange(b), [len(f) for f in facts])  # (K,) K = sum of k_b
        chosen = np.concatenate([np.asarray(f, dtype=np.int64) for f in facts]) if b else np.zeros(0, np.int64)
        values = np.concatenate([np.asarray(s, dtype=np.float64) for s in scores]) if b else np.zeros(0)
        for column in (0, 2):  # head, then tail; a fact whose head is its tail counts twice, as in the code
            phrases = index.triples[graph.facts[chosen], column]  # (K,)
            np.add.at(total, (rows, phrases), values / graph.passage_count[phrases])
            np.add.at(occurs, (rows, phrases), 1.0)
        mean = np.divide(total, occurs, out=np.zeros_like(total), where=occurs > 0)  # (B, E)
        ranked, _ = top_k_stable(np.where(occurs > 0, mean, -np.inf), self.linking_top_k)  # (B, k)
        seeds = np.zeros_like(mean)
        keep = np.take_along_axis(occurs, ranked, axis=1) > 0
        batch = np.broadcast_to(np.arange(b)[:, None], ranked.shape)
        seeds[batch[keep], ranked[keep]] = mean[batch[keep], ranked[keep]]
        return seeds

    def restart(
        self,
        queries: np.ndarray,
        index: KGIndex,
        passages: np.ndarray,
        facts: Sequence[np.ndarray] | None = None,
        scores: Sequence[np.ndarray] | None = None,
    ) -> np.ndarray:
        """Unnormalised seeds: phrase seeds on rows ``:E``, passage seeds on rows ``E:``. The seeding facts are
        ``facts`` / ``scores`` (None: the :meth:`linked_facts`, unfiltered).

        Shapes: ``queries`` (B, d), ``passages`` (P, d) -> (E + P, B) float64.
        """
        if facts is None or scores is None:
            facts, scores = self.linked_facts(queries, index)
        phrase_seeds = self.phrase_seeds(index, facts, scores)  # (B, E)
        passage_seeds = min_max(queries @ passages.T) * self.passage_node_weight  # (B, P)
        return np.concatenate([phrase_seeds, passage_seeds], axis=1).T

    def fact_triple(self, index: KGIndex, position: int) -> tuple[str, str, str]:
        """The (head, relation, tail) phrases of fact ``position`` of ``graph.facts``."""
        graph, _ = self.prepare(index)
        h, r, t = index.triples[graph.facts[position]]
        return index.entities[h], index.relations[r], index.entities[t]

    def seeding_facts(
        self, questions: Sequence[Question], index: KGIndex, queries: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per question, the facts that seed its graph search and their scores: the :meth:`linked_facts`, or
        those the recognition filter keeps of them (in its order; none: the question falls back to dense)."""
        chosen, values = self.linked_facts(queries, index)  # (B, k)
        if self.filter is None:
            for q, row in zip(questions, chosen, strict=True):
                self._traces[q.id] = {"linked": [list(self.fact_triple(index, f)) for f in row]}
            return list(chosen), list(values)
        facts, scores = [], []
        for q, row, value in zip(questions, chosen, values, strict=True):
            candidates = [self.fact_triple(index, f) for f in row]
            result = self.filter(q.id, q.question, candidates)
            facts.append(row[result.kept])
            scores.append(value[result.kept])
            self._traces[q.id] = {
                "linked": [list(c) for c in candidates],
                "filter": {
                    "outcome": result.outcome,
                    "kept": result.kept,
                    "generated": result.generated,
                    "reply": result.reply[:REPLY_SHOWN],
                },
            }
        return facts, scores

    def retrieve(
        self, questions: Sequence[Question], index: KGIndex, corpus: Corpus | None = None, top_k: int = 10
    ) -> list[Ranking]:
        """Rank passages by their node's PPR probability; also the top entities by PPR.

        A question left without a seeding fact (the index states none, or the recognition filter kept none)
        is ranked by min-max normalised dense scores, as HippoRAG 2's ``retrieve`` does.
        """
        graph, facts = self.prepare(index)
        passages = self.passage_embeddings(index, corpus)
        encoder, n = self._encoder(index), index.num_entities
        self.fallbacks, self._traces = 0, {}
        before = self.llm.usage.by_question(self.name) if self.llm is not None else {}
        rankings: list[Ranking] = []
        for start in range(0, len(questions), self.batch_size):
            batch = questions[start : start + self.batch_size]
            queries = np.asarray(
                encoder.encode([q.question for q in batch], stage="hipporag2: questions", unit="question")
            )
            dense, dense_values = top_k_stable(min_max(queries @ passages.T), top_k)  # (B, top_k)
            if len(facts) == 0:  # rerank_facts finds no fact: retrieve() returns dense_passage_retrieval
                self.fallbacks += len(batch)
                rankings += make_rankings([q.id for q in batch], index.passage_ids, dense, dense_values)
                continue
            seeding, scores = self.seeding_facts(batch, index, queries)
            live = np.array([len(f) > 0 for f in seeding])  # (B,) False: the filter kept no fact
            if live.any():
                facts_live = [f for f in seeding if len(f)]
                scores_live = [v for v in scores if len(v)]
                restart = self.restart(queries[live], index, passages, facts_live, scores_live)  # (E + P, B')
                for q, column in zip([q for q, on in zip(batch, live, strict=True) if on], restart.T, strict=True):
                    seeds = np.flatnonzero(column[:n])
                    self._traces[q.id]["seeds"] = [[index.entities[e], float(column[e])] for e in seeds]
                restart /= restart.sum(axis=0, keepdims=True)  # igraph normalises the reset vector
                ppr = personalized_pagerank(graph.walk, restart, self.damping, self.tol)  # (E + P, B')
                positions, values = top_k_stable(ppr[n:].T, top_k)  # (B', top_k)
                entities, entity_values = top_k_stable(ppr[:n].T, self.top_entities)  # (B', top_entities)
            row = np.cumsum(live) - 1  # (B,) a live question's column in the PPR arrays
            for b, q in enumerate(batch):
                if not live[b]:  # dense_passage_retrieval
                    self.fallbacks += 1
                    rankings += make_rankings([q.id], index.passage_ids, dense[b : b + 1], dense_values[b : b + 1])
                else:
                    one = slice(row[b], row[b] + 1)
                    rankings += make_rankings(
                        [q.id], index.passage_ids, positions[one], values[one], entities[one], entity_values[one]
                    )
        if self.llm is not None:
            after = self.llm.usage.by_question(self.name)
            self._cost = {q.id: after.get(q.id, Usage()).since(before.get(q.id)) for q in questions}
        if self.fallbacks:
            log.warning(
                "HippoRAG 2: %d of %d questions ranked by dense retrieval (no fact in the index, or the recognition "
                "filter kept none)",
                self.fallbacks,
                len(questions),
            )
        return rankings

    def llm_cost(self) -> dict[str, Usage]:
        """The recognition filter's LLM usage per question id of the last :meth:`retrieve` (empty without it)."""
        return dict(self._cost)

    def traces(self) -> dict[str, dict]:
        """Question id -> the linked facts, the filter's decision (with the filter) and the phrase seeds (with
        their unnormalised weights) of the last :meth:`retrieve`."""
        return dict(self._traces)

    def trace_summary(self) -> dict[str, dict]:
        """How often the recognition filter kept all, some or none of the linked facts, or could not be read, and
        how many questions fell back to dense retrieval."""
        if self.filter is None:
            return {"recognition filter": {"off": len(self._traces), "dense fallback": self.fallbacks}}
        outcomes = [t["filter"]["outcome"] for t in self._traces.values() if "filter" in t]
        counts = {k: outcomes.count(k) for k in ("kept all", "kept some", "kept none", "unreadable")}
        return {"recognition filter": counts | {"dense fallback": self.fallbacks}}
