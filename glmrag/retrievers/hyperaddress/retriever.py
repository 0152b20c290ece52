"""HyperAddress (Read the Route §4): Personalized PageRank on the description-labelled hypergraph.

The walk alternates between passages and entity hyperedges (§4.2) with incidence weights ``W[p, e]``
(``|e|^-1/2``, §4.1, times the steering factors of read incidences): ``Pr(e | p)`` and ``Pr(p | e)`` are
``W`` normalised over the passage's entities and over the entity's passages. The power iteration is the
PPR baseline's (:mod:`glmrag.graph.pagerank`) on the stacked vector ``[x_P; x_E]``. The restart comes from
the question: the ``restart_top`` incidences whose descriptions best match it share it by a softmax, each
split between its passage and its entity (:meth:`HyperAddressRetriever.restart`). A
:class:`~glmrag.retrievers.hyperaddress.steering.Steering` reader steers the rounds (§4.2); without one this
is the walk only. Every tunable is a field of :class:`~glmrag.retrievers.hyperaddress.settings.HyperAddressSettings`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, Question
from glmrag.graph.hypergraph import Describer, Hypergraph, SentenceDescriber, index_mentions, index_passages
from glmrag.graph.pagerank import Walk, personalized_pagerank, transition
from glmrag.index.embed import DEFAULT_MODEL, Embedder
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, top_k_stable
from glmrag.io import load_cached_array, write_cache_array
from glmrag.llm.base import Usage
from glmrag.progress import progress
from glmrag.retrievers.base import Ranking, checked_settings
from glmrag.retrievers.hyperaddress.llm_descriptions import USAGE_TAG as DESCRIPTIONS_TAG
from glmrag.retrievers.hyperaddress.settings import HyperAddressSettings
from glmrag.retrievers.hyperaddress.steering import HEADS_TAG, Steering

log = logging.getLogger(__name__)

TRACE_RESTARTS = 3
"""Restart incidences kept per question in the trace (inspection only)."""


@dataclass(frozen=True)
class HyperWalk(Walk):
    """The walk on the stacked nodes ``[passages; entities]`` (:class:`~glmrag.graph.pagerank.Walk`).

    Its transition is bipartite: ``transition_t = [[0, to_passages], [to_entities, 0]]``.
    """

    num_passages: int
    """P: nodes ``0..P-1`` are passages, the rest entities."""

    @property
    def to_entities(self) -> sp.csr_matrix:
        """(E, P) ``Pr(e | p)`` transposed: column ``p`` sums to 1 unless ``p`` is dangling."""
        return self.transition_t[self.num_passages :, : self.num_passages]

    @property
    def to_passages(self) -> sp.csr_matrix:
        """(P, E) ``Pr(p | e)`` transposed: column ``e`` sums to 1 unless ``e`` is dangling."""
        return self.transition_t[: self.num_passages, self.num_passages :]

    @property
    def dangling_passages(self) -> np.ndarray:
        """(P,) bool, passages without an incidence of positive weight."""
        return self.dangling[: self.num_passages]

    @property
    def dangling_entities(self) -> np.ndarray:
        """(E,) bool, entities without an incidence of positive weight."""
        return self.dangling[self.num_passages :]


def hyper_walk(graph: Hypergraph, weights: np.ndarray | None = None) -> HyperWalk:
    """The walk with incidence weights ``weights`` (I,) (default ``|e|^-1/2``); zero weights remove an incidence."""
    h = graph.incidence_matrix(weights)  # (P, E)
    both_ways = sp.bmat([[None, h], [h.T, None]], format="csr")  # (P + E, P + E): p -> e and e -> p, weight W[p, e]
    transition_t, dangling = transition(both_ways)
    return HyperWalk(transition_t, dangling, graph.num_passages)


def hypergraph_pagerank(
    walk: HyperWalk,
    restart_passages: np.ndarray,
    restart_entities: np.ndarray,
    damping: float = HyperAddressSettings.damping,
    tol: float = HyperAddressSettings.tol,
    dtype=np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """PageRank of the alternating walk for every restart column, within ``tol`` (L1) of the fixed point.

    Each column of ``[restart_passages; restart_entities]`` must sum to 1; the power iteration is
    :func:`glmrag.graph.pagerank.personalized_pagerank` on the stacked vector.

    Shapes: ``restart_passages`` (P, B), ``restart_entities`` (E, B) -> (P, B), (E, B), columns summing to 1 together.
    """
    x = personalized_pagerank(walk, np.concatenate([restart_passages, restart_entities]), damping, tol, dtype)
    return x[: walk.num_passages], x[walk.num_passages :]  # (P, B), (E, B)


class LabelEmbeddings:
    """Embeddings of incidence descriptions, computed once per distinct text (so added passages cost only theirs).

    ``cache_dir``: the matrix is also stored as ``labels-<model>-<hash of the texts>.npz``.
    """

    def __init__(self, encoder, model_name: str = "", cache_dir: str | Path | None = None) -> None:
        self.encoder, self.model_name = encoder, model_name
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.row: dict[str, int] = {}
        self.matrix = np.zeros((0, 0), dtype=np.float32)

    def _path(self, texts: list[str]) -> Path | None:
        if self.cache_dir is None:
            return None
        h = hashlib.sha256(self.model_name.encode())
        for t in texts:
            h.update(t.encode() + b"\0")
        return self.cache_dir / f"labels-{h.hexdigest()[:16]}.cache"

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        """(N,) int64 rows of ``texts`` in :attr:`matrix`, embedding the texts not seen before."""
        new = list(dict.fromkeys(t for t in texts if t not in self.row))
        if new:
            path = self._path(new)
            vectors = load_cached_array(path) if path is not None else None  # None when missing or not intact
            if vectors is None or vectors.shape[0] != len(new):
                vectors = np.asarray(self.encoder.encode(new), dtype=np.float32)  # (N_new, d) unit rows
                if path is not None:
                    write_cache_array(path, vectors)
            self.matrix = vectors if self.matrix.size == 0 else np.concatenate([self.matrix, vectors])
            self.row.update({t: len(self.row) + i for i, t in enumerate(new)})
        return np.asarray([self.row[t] for t in texts], dtype=np.int64)


@dataclass
class HyperIndex:
    """What one corpus's walk needs: the hypergraph, its base walk and where each description is embedded."""

    graph: Hypergraph
    walk: HyperWalk
    description_row: np.ndarray
    """(D,) row in the label embeddings of every description, incidence by incidence."""
    description_ptr: np.ndarray
    """(I + 1,) incidence ``i``'s descriptions are ``description_row[ptr[i]:ptr[i + 1]]``."""


class HyperAddressRetriever:
    """HyperAddress: PPR on the hypergraph from the question, walk only or steered by a reader.

    An :class:`~glmrag.retrievers.base.LLMCostedRetriever`: see :meth:`llm_cost` and :meth:`index_llm_cost`.

    The hypergraph is built from the index's passage<->entity map and the corpus texts on first use (kept
    for the last index seen).

    Args:
        settings: the walk's constants; default :class:`HyperAddressSettings`.
        embed_model: sentence-transformers name or path of the question and description embeddings.
        cache_dir: where description embeddings are cached, keyed by model and texts.
        describer: writes each incidence's labels; default the offline sentence describer
            (``settings.max_descriptions`` sentences).
        steering: the reader's rounds (§4.2); ``None`` is "the walk without reading" (§5.3).
        name: usage tag of the steering forward passes (the eval job's retriever key).
        encoder: any object with ``encode(texts) -> (N, d)`` unit rows in place of the embedder (tests).
    """

    name = "hyperaddress"

    def __init__(
        self,
        settings: HyperAddressSettings | None = None,
        embed_model: str = DEFAULT_MODEL,
        cache_dir: str | Path | None = None,
        describer: Describer | None = None,
        batch_size: int = 256,
        encoder=None,
        steering: Steering | None = None,
        name: str = "hyperaddress",
    ) -> None:
        settings = checked_settings(
            HyperAddressSettings,
            settings,
            f"HyperAddressRetriever {name!r}",
            "settings",
            "configs/retriever/hyperaddress.yaml",
        )
        self.settings, self.batch_size = settings, batch_size
        self.describer = describer or SentenceDescriber(settings.max_descriptions)
        # any object with encode(texts) -> (N, d) unit rows may stand in for the MiniLM embedder (tests)
        self.embedder = encoder if encoder is not None else Embedder(embed_model, batch_size=batch_size)
        self.labels = LabelEmbeddings(self.embedder, embed_model, cache_dir)
        self.steering, self.name = steering, name
        self._cache: tuple[KGIndex, HyperIndex] | None = None
        self._cost: dict[str, Usage] = {}
        self._traces: dict[str, dict] = {}
        self._texts: dict[int, str] = {}

    def index_graph(self, graph: Hypergraph) -> HyperIndex:
        """Embed ``graph``'s descriptions (new ones only) and build its base walk."""
        counts = np.fromiter((len(d) for d in graph.labels), dtype=np.int64, count=graph.num_incidences)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        rows = self.labels.rows([t for d in graph.labels for t in d])
        return HyperIndex(graph, hyper_walk(graph), rows, ptr)

    def prepare(self, index: KGIndex, corpus: Corpus) -> HyperIndex:
        """The hypergraph of ``index`` and ``corpus``, built on first use and kept while the same index is passed."""
        if self._cache is None or self._cache[0] is not index:
            prefetch = getattr(self.describer, "prefetch", None)
            if prefetch is not None:  # a describer that batches (LLMDescriber) writes every label up front
                positions = range(index.num_passages)
                prefetch(index_passages(index, corpus, positions), index_mentions(index, positions))
            graph = Hypergraph.from_index(index, corpus, self.describer)
            log.info("hypergraph: %d passages, %d incidences", graph.num_passages, graph.num_incidences)
            self._cache = (index, self.index_graph(graph))
        return self._cache[1]

    def incidence_similarity(self, hyper: HyperIndex, queries: np.ndarray) -> np.ndarray:
        """Best cosine between each query and each incidence's descriptions. Shapes: (B, d) -> (B, I)."""
        sims = queries @ self.labels.matrix.T  # (B, U)
        per_description = sims[:, hyper.description_row]  # (B, D)
        return np.maximum.reduceat(per_description, hyper.description_ptr[:-1], axis=1)  # (B, I)

    def restart(self, hyper: HyperIndex, similarity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Restart distributions from incidence similarities: the ``settings.restart_top`` best incidences share
        the restart by a softmax of ``cosine / settings.temperature``, each share split between the incidence's
        passage (fraction ``settings.passage_share``) and its entity (the rest).

        Shapes: ``similarity`` (B, I) -> passages (P, B), entities (E, B) float64; each column pair sums to 1.
        """
        graph = hyper.graph
        b = len(similarity)
        top, values = top_k_stable(similarity, self.settings.restart_top)  # (B, k)
        values = values.astype(np.float64)
        weights = np.exp((values - values[:, :1]) / self.settings.temperature)  # (B, k) stable softmax
        weights /= weights.sum(axis=1, keepdims=True)
        cols = np.repeat(np.arange(b), top.shape[1])
        share = self.settings.passage_share
        r_p = sp.coo_matrix(
            (share * weights.ravel(), (graph.incidence_passage[top.ravel()], cols)),
            shape=(graph.num_passages, b),
        ).toarray()  # duplicates summed
        r_e = sp.coo_matrix(
            ((1.0 - share) * weights.ravel(), (graph.incidence_entity[top.ravel()], cols)),
            shape=(graph.num_entities, b),
        ).toarray()
        return r_p, r_e

    def restart_for(self, hyper: HyperIndex, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Description restarts of question texts. Shapes: -> passages (P, B), entities (E, B)."""
        queries = self.embedder.encode(list(texts))  # (B, d)
        return self.restart(hyper, self.incidence_similarity(hyper, queries))

    def pagerank(
        self, graph: Hypergraph, weights: np.ndarray, r_p: np.ndarray, r_e: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """One question's PageRank with incidence weights ``weights``. Shapes: (I,), (P,), (E,) -> (P,), (E,)."""
        walk, s = hyper_walk(graph, weights), self.settings
        x_p, x_e = hypergraph_pagerank(walk, r_p[:, None], r_e[:, None], s.damping, s.tol)
        return x_p[:, 0], x_e[:, 0]

    def scores(
        self,
        questions: Sequence[Question],
        hyper: HyperIndex,
        corpus: Corpus | None = None,
        index: KGIndex | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """PageRank of passages and entities, walk only or steered (then ``corpus`` is needed; ``index``'s
        question links name what a rewrite must keep, :func:`protected_names`).

        Shapes: -> (B, P), (B, E).
        """
        similarity = self.incidence_similarity(hyper, self.embedder.encode([q.question for q in questions]))
        r_p, r_e = self.restart(hyper, similarity)
        self._restart_trace(hyper, questions, similarity)
        x_p, x_e = hypergraph_pagerank(hyper.walk, r_p, r_e, self.settings.damping, self.settings.tol)
        x_p, x_e = x_p.T.copy(), x_e.T.copy()
        if self.steering is not None and self.steering.settings.rounds > 0:
            ids = hyper.graph.passage_ids

            def passage(p: int):
                return corpus[corpus.position(ids[p])]

            reader = self.steering.reader
            self.steering.addressing_heads(hyper.graph, passage)  # before any question's tag: index cost
            for b, q in enumerate(questions):
                before = _usage_of(reader.llm, self.name, q.id)
                with reader.track(self.name, q.id):
                    x_p[b], x_e[b] = self.steering.steer(
                        self,
                        hyper,
                        passage,
                        q.id,
                        q.question,
                        (r_p[:, b], r_e[:, b]),
                        (x_p[b], x_e[b]),
                        protected_names(index, q.id) if index is not None else (),
                    )
                self._cost[q.id] = _usage_of(reader.llm, self.name, q.id).since(before)
        return x_p, x_e

    def _restart_trace(self, hyper: HyperIndex, questions: Sequence[Question], similarity: np.ndarray) -> None:
        """Keep, per question, the :data:`TRACE_RESTARTS` incidences of highest description cosine."""
        graph = hyper.graph
        top, values = top_k_stable(similarity, TRACE_RESTARTS)  # (B, k)
        for q, rows, cos in zip(questions, top, values, strict=True):
            best = hyper.description_row[hyper.description_ptr[rows]]  # the first description of each incidence
            self._traces[q.id] = {
                "restart": [
                    [
                        graph.passage_ids[graph.incidence_passage[i]],
                        graph.entities[graph.incidence_entity[i]],
                        self._label_text(int(d)),
                        round(float(c), 4),
                    ]
                    for i, d, c in zip(rows, best, cos, strict=True)
                ]
            }

    def _label_text(self, row: int) -> str:
        if not self._texts or len(self._texts) != len(self.labels.row):
            self._texts = {r: t for t, r in self.labels.row.items()}
        return self._texts[row]

    def retrieve(self, questions: Sequence[Question], index: KGIndex, corpus: Corpus, top_k: int = 10) -> list[Ranking]:
        """Passages ranked by PageRank mass (ties in index order), and the top entities by theirs."""
        hyper = self.prepare(index, corpus)
        self._cost = {q.id: Usage() for q in questions}
        self._traces = {}
        rankings: list[Ranking] = []
        for start in progress(range(0, len(questions), self.batch_size), self.name, unit="batch"):
            batch = questions[start : start + self.batch_size]
            x_p, x_e = self.scores(batch, hyper, corpus, index)
            positions, values = top_k_stable(x_p, top_k)
            entities, entity_values = top_k_stable(x_e, self.settings.top_entities)
            rankings += make_rankings(
                [q.id for q in batch], hyper.graph.passage_ids, positions, values, entities, entity_values
            )
        return rankings

    def llm_cost(self) -> dict[str, Usage]:
        """Per question id of the last :meth:`retrieve`: the steering reader's forward passes for it.

        Each pass is a call with ``prompt_tokens`` = tokens read, 0 generated, its wall seconds
        (Fig. 5 compares per-question cost); the walk only (or a reader without an LLM) costs zeros.
        Descriptions and head selection are built once per corpus, not per question: they are
        reported by :meth:`index_llm_cost`, not here.
        """
        return {qid: Usage().add(u) for qid, u in self._cost.items()}

    def traces(self) -> dict[str, dict]:
        """Question id -> what the last :meth:`retrieve` did for it: the restart's best incidences (passage,
        entity, description, cosine) and, when steered, the heads and per round the passages read, pointer
        targets, rewrite (before/after) and the round's top passages."""
        steered = self.steering.traces if self.steering is not None else {}
        return {qid: t | steered.get(qid, {}) for qid, t in self._traces.items()}

    def trace_summary(self) -> dict[str, dict]:
        """Counts over :meth:`traces` for the report: rounds run, rewrites fired or not, and head selection."""
        traces = self.traces()
        steps = [step for t in traces.values() for step in t.get("rounds", [])]
        rewrites = [s["rewrite"] for s in steps if s["rewrite"] is not None]
        summary: dict[str, dict] = {
            "steering": {
                "questions": sum("rounds" in t for t in traces.values()),
                "rounds": len(steps),
                "rounds_without_candidates": sum(not s["targets"] for s in steps),
                "rewrites_fired": sum(r != "none" for r in rewrites),
                "rewrites_not_fired": sum(r == "none" for r in rewrites),
            }
        }
        selection = self.steering.selection if self.steering is not None else None
        if selection is not None:
            summary["head_selection"] = {
                "probes": selection.probes,
                "held_out_probes": selection.held_out_probes,
                "mean_hit_rate": float(np.mean(selection.hit_rate)),
                "mean_held_out_hit_rate": float(np.mean(selection.held_out_hit_rate)),
                "from_cache": selection.from_cache,
                **{f"selection_{name}": value for name, value in (selection.cost or {}).items()},
            }
        return summary

    def index_llm_cost(self) -> dict[str, Usage]:
        """LLM usage of the index side (Table 8's index cost), summed over this process so far.

        ``hyperaddress_descriptions``: the LLM descriptions (:mod:`glmrag.retrievers.hyperaddress.llm_descriptions`;
        zero for sentence descriptions or when every passage came from the description cache);
        ``hyperaddress_heads``: the addressing-head selection passes (zero when heads are fixed or cached; a
        cached selection's own cost is in :meth:`trace_summary`, ``head_selection``).
        """
        reader_llm = self.steering.reader.llm if self.steering is not None else None
        sources = {DESCRIPTIONS_TAG: getattr(self.describer, "llm", None), HEADS_TAG: reader_llm}
        return {tag: _method_usage(llm, tag) for tag, llm in sources.items()}


class NameDescriber:
    """§5.3's "removing labels": every incidence is labelled by its entity's name only, so the restart and
    the rewrite match question words against names, not descriptions."""

    name = "entity-name"

    def describe(self, passage, entities: Sequence[str]) -> list[tuple[str, ...]]:
        return [(e,) for e in entities]


def protected_names(index: KGIndex, question_id: str) -> list[str]:
    """What the question names by the index's links: each linked entity's name and the question's NER mention
    (any case; the rewrite keeps them, :mod:`~glmrag.retrievers.hyperaddress.rewrite`)."""
    links = index.question_links.get(question_id, [])
    return list(dict.fromkeys([index.entities[link.entity] for link in links] + [link.mention for link in links]))


def _usage_of(llm, method: str, question_id: str | None = None) -> Usage:
    """``llm``'s usage under ``(method, question_id)``; zeros without an LLM."""
    return llm.usage.get(method, question_id) if llm is not None else Usage()


def _method_usage(llm, method: str) -> Usage:
    """``llm``'s usage under ``method``, summed over question ids; zeros without an LLM."""
    return llm.usage.by_method().get(method, Usage()) if llm is not None else Usage()
