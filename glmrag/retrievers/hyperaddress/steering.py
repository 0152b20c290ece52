"""Attention steering of the HyperAddress walk (Read the Route §4.2, App. A).

Each round the reader reads the top-ranked passages and the question in one forward pass, without
generating (§4.2), and its addressing heads' pointer scores steer the walk: they add a restart term over the
read entities, and they reweight every incidence ``(p, e)`` of a read passage to ``|e|^-1/2 (1 + gain s_e)``
(``s_e`` the entity's score relative to the best read entity), so both transitions follow them. Between
rounds a question description may be rewritten to the entity it most likely names
(:mod:`~glmrag.retrievers.hyperaddress.rewrite`); the rewritten question's restart, weight 2, is added to
the earlier ones (App. A). Every reader pass is counted in the reader LLM's usage under the retriever's
per-question tag; head selection under :data:`HEADS_TAG` (index cost, Table 8).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from glmrag.data.types import Passage
from glmrag.graph.hypergraph import mention_spans
from glmrag.index.ranking import top_k_stable
from glmrag.retrievers.base import checked_settings
from glmrag.retrievers.hyperaddress.addressing_heads import random_heads, select_heads
from glmrag.retrievers.hyperaddress.reader_pointers import (
    ReadContext,
    Reader,
    build_context,
    entity_pointer,
    pointer_scores,
)
from glmrag.retrievers.hyperaddress.rewrite import anchor_spans, best_rewrite, candidate_spans, without_title
from glmrag.retrievers.hyperaddress.settings import SteeringSettings

log = logging.getLogger(__name__)

HEADS_TAG = "hyperaddress_heads"
"""Usage tag of the head-selection forward passes (index cost: "head selection is included in the index
cost", App. A.2, Table 8), apart from the per-question steering passes."""
TOP_TARGETS = 5
"""Pointer targets kept per round in the trace (inspection only)."""


class Steering:
    """The reader-driven part of HyperAddress, given to a ``HyperAddressRetriever``.

    Args:
        reader: the reader, passed in (e.g. ``Reader.from_llm`` of the local LLM backend).
        settings: the rounds, heads and rewrite constants; default :class:`SteeringSettings`.
        cache_dir: where selected heads are cached per reader model
            (:mod:`~glmrag.retrievers.hyperaddress.addressing_heads`).
        seed: seeds the probes and a random head set.

    A rewrite considers the ``settings.rewrite_candidates`` read entities of highest pointer score not already
    named, over spans of 1 to ``settings.max_span`` words. :attr:`traces` keeps, per question, the heads and
    per round the passages read, the top pointer targets and the rewrite or why none fired.
    """

    def __init__(
        self,
        reader: Reader,
        settings: SteeringSettings | None = None,
        cache_dir: str | Path | None = None,
        seed: int = 0,
    ) -> None:
        settings = checked_settings(
            SteeringSettings, settings, "Steering", "steering.settings", "configs/retriever/hyperaddress_2rounds.yaml"
        )
        self.reader, self.settings, self.seed = reader, settings, seed
        self.heads = list(settings.heads) if settings.heads is not None else None
        """The addressing heads: the fixed ones, or those selected or drawn on first use."""
        self.cache_dir = cache_dir
        self.selection = None
        """The :class:`~glmrag.retrievers.hyperaddress.addressing_heads.HeadSelection` when heads were selected here."""
        self.rewrites: dict[str, list[str]] = {}
        """Question id -> the question versions read, for inspection."""
        self.traces: dict[str, dict] = {}
        """Question id -> what the rounds did: the heads and, per round, the passages read, top targets, rewrite."""

    def addressing_heads(self, graph, passage: Callable[[int], Passage]) -> list[tuple[int, int]]:
        """The fixed heads, random ones, or those selected on probes (first use; passes under :data:`HEADS_TAG`).

        Call it outside any question's usage tag: a tag's question id is inherited by nested tags.
        """
        if self.heads is None and self.settings.head_set == "random":
            self.heads = random_heads(self.reader, self.settings.num_heads, self.seed)
        elif self.heads is None:
            with self.reader.track(HEADS_TAG):
                self.selection = select_heads(
                    self.reader,
                    graph,
                    passage,
                    self.settings.num_heads,
                    self.settings.probes,
                    self.settings.probe_passages,
                    self.seed,
                    self.cache_dir,
                )
            self.heads = self.selection.heads
        return self.heads

    def read(self, graph, passage: Callable[[int], Passage], positions: Sequence[int], question: str) -> ReadContext:
        """The reader input of ``positions`` (best first) and ``question``."""
        blocks = []
        for p in positions:
            ids = graph.incidence_entity[list(graph.incidences_of(p))]
            entities = [(int(e), graph.entities[e]) for e in ids]
            blocks.append((int(p), passage(int(p)), entities))
        return build_context(self.reader, blocks, question)

    def rewritten(
        self,
        retriever,
        graph,
        passage,
        context: ReadContext,
        scores: np.ndarray,
        question: str,
        protected: Sequence[str] = (),
    ):
        """The question with one description span replaced by the entity it most likely describes, or None.

        Never a span over a named anchor (:func:`~glmrag.retrievers.hyperaddress.rewrite.anchor_spans`; with
        ``protected``, the question's linked entity names and NER mentions, in any case); see App. A and
        :mod:`~glmrag.retrievers.hyperaddress.rewrite`. Returns a
        :class:`~glmrag.retrievers.hyperaddress.rewrite.Rewrite`.
        """
        order = np.argsort(-scores, kind="stable")
        unnamed = [c for c in order if not mention_spans(question, graph.entities[context.candidates[c]])]
        chosen = [context.candidates[c] for c in unnamed[: self.settings.rewrite_candidates] if scores[c] > 0]
        titles = [passage(p).title for p in context.passages]
        spans = candidate_spans(question, self.settings.max_span, anchor_spans(question, titles, protected))
        read = set(context.passages)
        labels = []
        for i in np.flatnonzero(np.isin(graph.incidence_entity, chosen)):
            p = int(graph.incidence_passage[i])
            if p in read:
                title = passage(p).title
                labels += [(int(graph.incidence_entity[i]), without_title(t, title)) for t in graph.labels[i]]

        def encode(texts: list[str]) -> np.ndarray:
            rows = retriever.labels.rows(texts)  # first: it may append new texts' embeddings to the matrix
            return retriever.labels.matrix[rows]  # (N, d), each text embedded once

        return best_rewrite(question, spans, labels, context.surface, encode, self.settings.rewrite_threshold)

    def generated_target(
        self, retriever, graph, context: ReadContext, passage, question: str
    ) -> tuple[np.ndarray, str]:
        """App. A's generated-name variant: the reader names the bridge; the read entity nearest that name
        by embedding cosine gets score 1, the others 0. Shapes: -> (C,), and the generated name."""
        texts = "\n\n".join(f"Wikipedia Title: {passage(p).title}\n{passage(p).text}" for p in context.passages)
        prompt = (
            f"{texts}\n\nQuestion: {question}\nWhich entity in the passages does the question describe "
            "without naming it? Answer with its name only.\nName:"
        )
        name = self.reader.llm.complete(prompt, max_new_tokens=12, stop=["\n"]).strip() if self.reader.llm else ""
        scores = np.zeros(len(context.candidates))
        if name:
            rows = retriever.labels.rows([name, *(graph.entities[e] for e in context.candidates)])
            vectors = retriever.labels.matrix[rows]  # (1 + C, d)
            scores[int(np.argmax(vectors[1:] @ vectors[0]))] = 1.0
        return scores, name

    def steer(
        self,
        retriever,
        hyper,
        passage: Callable[[int], Passage],
        question_id: str,
        question: str,
        restart: tuple[np.ndarray, np.ndarray],
        walk: tuple[np.ndarray, np.ndarray],
        protected: Sequence[str] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """Run the rounds for one question from its walk-only ranking; returns the steered (P,), (E,) PageRank.

        ``retriever`` provides ``restart_for``, ``pagerank``, ``labels`` and ``embedder``
        (:class:`~glmrag.retrievers.hyperaddress.retriever.HyperAddressRetriever`); ``restart`` is the
        question's description restart and ``walk`` its walk-only PageRank, each as passages (P,) and entities (E,);
        ``protected``: names no rewrite may touch (the question's linked entities and NER mentions).
        """
        graph, s = hyper.graph, self.settings
        heads = self.addressing_heads(graph, passage)
        base = graph.incidence_weights()
        factor = np.ones_like(base)
        terms = [(1.0, restart[0], restart[1])]
        versions = [question]
        trace: dict = {"heads": [list(h) for h in heads], "rounds": []}
        x_p, x_e = walk
        for k in range(s.rounds):
            top, _ = top_k_stable(x_p[None], s.read_top)
            context = self.read(graph, passage, top[0], versions[-1])
            step: dict = {"read": [graph.passage_ids[p] for p in context.passages], "targets": [], "rewrite": None}
            scores = np.zeros(0)
            if context.candidates:
                if s.target == "generated_name":
                    scores, step["generated_name"] = self.generated_target(
                        retriever, graph, context, passage, versions[-1]
                    )
                else:
                    scores = entity_pointer(pointer_scores(self.reader, context, heads), s.pointer)  # (C,)
                candidates = np.asarray(context.candidates)
                best = np.argsort(-scores, kind="stable")[:TOP_TARGETS]
                step["targets"] = [[graph.entities[candidates[c]], round(float(scores[c]), 6)] for c in best]
                if scores.sum() > 0:
                    r_e = np.zeros(graph.num_entities)
                    r_e[candidates] = scores / scores.sum()
                    terms.append((s.pointer_weight, np.zeros(graph.num_passages), r_e))
                    pointed = np.zeros(graph.num_entities)
                    pointed[candidates] = scores / scores.max()
                    read = np.concatenate([np.asarray(graph.incidences_of(p), int) for p in context.passages])
                    factor[read] = 1.0 + s.transition_gain * pointed[graph.incidence_entity[read]]
            if s.rewrite and k < s.rounds - 1:
                new = (
                    self.rewritten(retriever, graph, passage, context, scores, versions[-1], protected)
                    if scores.size
                    else None
                )
                step["rewrite"] = new.as_dict() if new is not None else "none"
                if new is not None:
                    versions.append(new.after)
                    r_p, r_e = retriever.restart_for(hyper, [new.after])
                    terms.append((s.rewrite_weight, r_p[:, 0], r_e[:, 0]))
            total = sum(w for w, _, _ in terms)
            r_p = sum(w * p for w, p, _ in terms) / total
            r_e = sum(w * e for w, _, e in terms) / total
            x_p, x_e = retriever.pagerank(graph, base * factor, r_p, r_e)
            best, values = top_k_stable(x_p[None], TOP_TARGETS)
            step["ranking"] = [
                [graph.passage_ids[p], round(float(v), 6)] for p, v in zip(best[0], values[0], strict=True)
            ]
            trace["rounds"].append(step)
        self.rewrites[question_id] = versions
        self.traces[question_id] = trace
        return x_p, x_e
