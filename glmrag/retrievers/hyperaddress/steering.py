"""Attention steering of the HyperAddress walk (Read the Route §4.2, App. A).

Per round, "the reader processes top-ranked passages and the question in one
forward pass ... without generating tokens" (§4, §4.2), and the addressing
heads' pointer scores (:mod:`glmrag.retrievers.hyperaddress.reader_pointers`)

- **set the restart**: the read entities' pointer scores, normalised, form a
  restart term of weight ``pointer_weight``, added to the question's
  description restart (weight 1);
- **reweight read incidences in both directions** (§4.2): the weight of every
  incidence ``(p, e)`` of a read passage becomes ``|e|^-1/2 (1 + gain * s_e)``,
  ``s_e`` the entity's pointer score over the best read entity's (0 for an
  entity the heads cannot point at); the walk's two transitions are normalised
  from these weights, so both passage -> entity and entity -> passage moves
  follow them. A later round overwrites the factors of the incidences it reads.

**Rewriting** between rounds (§4.2, App. A): "a question span is replaced with
the name of the entity most likely described, when span-label cosine
similarity is at least 0.7"; the candidates are the ``rewrite_candidates`` read
entities with the highest pointer scores not already named in the question,
the spans every run of 1 to ``max_span`` question words, the labels those of
the candidate's read incidences. "The rewritten question's restart, weighted 2,
is added to restarts from earlier question versions" (App. A), and the next
round reads the rewritten question.

**Cost** (Fig. 5, Table 8): every reader forward pass is counted in the usage of
the reader's LLM as one call reading ``S`` tokens and generating none
(:func:`~glmrag.retrievers.hyperaddress.reader_pointers.pointer_scores`), under the tag the
retriever sets per question; head selection under :data:`HEADS_TAG`.

Variants (§5.3, Fig. 4, App. A): ``rounds`` 0 is the walk only, 1 one reader pass
(no rewriting), 2 two rounds with one rewrite; the ablations of §5.3 are
``head_set="random"`` (random heads instead of the selected ones),
``pointer="last_token"`` (scores read at the question's last token only, §3
Obs. 2), ``transition_gain=0`` (no steered transitions) and
``target="generated_name"`` (App. A: the reader *generates* the bridge's name,
mapped to a read entity by embedding similarity; that entity takes the whole
pointer share and is the only rewrite candidate).

**Trace**: :attr:`Steering.traces` keeps, per question, the heads, and per
round the passages read, the top pointer targets, and the rewrite (before,
after, span, label, cosine) or why none fired.

**Constants** not in the text copy of the paper (Table 6 values): ``read_top``
5, ``pointer_weight`` 1, ``transition_gain`` 2, ``max_span`` 4,
``rewrite_candidates`` 3 are stated choices. From the paper: 8 addressing
heads (§3), threshold 0.7 and restart weight 2 (App. A).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from glmrag.data.types import Passage
from glmrag.graph.hypergraph import mention_spans
from glmrag.index.ranking import top_k_stable
from glmrag.retrievers.hyperaddress.addressing_heads import NUM_HEADS, NUM_PROBES, random_heads, select_heads
from glmrag.retrievers.hyperaddress.reader_pointers import (
    POINTERS,
    ReadContext,
    Reader,
    build_context,
    entity_pointer,
    pointer_scores,
)
from glmrag.retrievers.hyperaddress.rewrite import anchor_spans, best_rewrite, candidate_spans, without_title

log = logging.getLogger(__name__)

REWRITE_THRESHOLD = 0.7
"""Span-label cosine needed to rewrite (App. A)."""
REWRITE_WEIGHT = 2.0
"""Restart weight of a rewritten question (App. A)."""
HEADS_TAG = "hyperaddress_heads"
"""Usage tag of the head-selection forward passes (index cost: "head selection is included in the index
cost", App. A.2, Table 8), apart from the per-question steering passes."""
HEAD_SETS = ("selected", "random")
"""Addressing heads: selected on probes (§3), or a seeded random set (§5.3's alternative head sets)."""
TARGETS = ("heads", "generated_name")
"""What steers: the heads' pointer scores (§4.2), or a name the reader generates (App. A's generated-name variant)."""
TOP_TARGETS = 5
"""Pointer targets kept per round in the trace (inspection only)."""


class Steering:
    """The reader-driven part of HyperAddress, given to a ``HyperAddressRetriever``.

    ``reader`` is passed in (e.g. ``Reader.from_llm`` of the local LLM backend).
    ``heads`` fixes the addressing heads; otherwise they are selected on
    ``probes`` unlabeled probes from the corpus on first use and cached in
    ``cache_dir`` per reader model (:mod:`glmrag.retrievers.hyperaddress.addressing_heads`),
    or drawn at random (``head_set="random"``, seeded by ``seed``).
    ``rewrite`` defaults to ``rounds >= 2`` (rewrites happen between rounds).
    """

    def __init__(
        self,
        reader: Reader,
        rounds: int = 2,
        read_top: int = 5,
        num_heads: int = NUM_HEADS,
        probes: int = NUM_PROBES,
        probe_passages: int = 4,
        heads: Sequence[Sequence[int]] | None = None,
        head_set: str = "selected",
        pointer: str = "word",
        target: str = "heads",
        pointer_weight: float = 1.0,
        transition_gain: float = 2.0,
        rewrite: bool | None = None,
        rewrite_threshold: float = REWRITE_THRESHOLD,
        rewrite_weight: float = REWRITE_WEIGHT,
        max_span: int = 4,
        rewrite_candidates: int = 3,
        cache_dir: str | Path | None = None,
        seed: int = 0,
    ) -> None:
        if rounds < 0 or read_top < 1 or num_heads < 1 or transition_gain < 0 or pointer_weight < 0:
            raise ValueError(
                f"rounds={rounds} (>= 0), read_top={read_top} (>= 1), num_heads={num_heads} (>= 1), "
                f"transition_gain={transition_gain} and pointer_weight={pointer_weight} (>= 0) are out of range"
            )
        for key, value, allowed in (
            ("head_set", head_set, HEAD_SETS),
            ("pointer", pointer, POINTERS),
            ("target", target, TARGETS),
        ):
            if value not in allowed:
                raise ValueError(f"Steering {key}={value!r} is unknown; expected one of {', '.join(allowed)}")
        if rewrite and rounds < 2:
            raise ValueError(
                f"Steering rewrite=True with rounds={rounds}: a rewrite happens between rounds (App. A), so it "
                "needs rounds >= 2; set rewrite: false (or leave it null) for one round"
            )
        self.reader, self.rounds, self.read_top = reader, rounds, read_top
        self.num_heads, self.probes, self.probe_passages, self.seed = num_heads, probes, probe_passages, seed
        self.heads = [tuple(int(x) for x in h) for h in heads] if heads is not None else None
        self.head_set, self.pointer, self.target = head_set, pointer, target
        self.pointer_weight, self.transition_gain = pointer_weight, transition_gain
        self.rewrite = rounds >= 2 if rewrite is None else bool(rewrite)
        self.rewrite_threshold, self.rewrite_weight = rewrite_threshold, rewrite_weight
        self.max_span, self.rewrite_candidates = max_span, rewrite_candidates
        self.cache_dir = cache_dir
        self.selection = None
        """The :class:`~glmrag.retrievers.hyperaddress.addressing_heads.HeadSelection` when heads were selected here."""
        self.rewrites: dict[str, list[str]] = {}
        """Question id -> the question versions read, for inspection."""
        self.traces: dict[str, dict] = {}
        """Question id -> what the rounds did (module docstring, "Trace")."""

    def addressing_heads(self, graph, passage: Callable[[int], Passage]) -> list[tuple[int, int]]:
        """The fixed heads, random ones, or those selected on probes (first use; passes under :data:`HEADS_TAG`).

        Call it outside any question's usage tag: a tag's question id is inherited by nested tags.
        """
        if self.heads is None and self.head_set == "random":
            self.heads = random_heads(self.reader, self.num_heads, self.seed)
        elif self.heads is None:
            with self.reader.track(HEADS_TAG):
                self.selection = select_heads(
                    self.reader,
                    graph,
                    passage,
                    self.num_heads,
                    self.probes,
                    self.probe_passages,
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
        chosen = [context.candidates[c] for c in unnamed[: self.rewrite_candidates] if scores[c] > 0]
        titles = [passage(p).title for p in context.passages]
        spans = candidate_spans(question, self.max_span, anchor_spans(question, titles, protected))
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

        return best_rewrite(question, spans, labels, context.surface, encode, self.rewrite_threshold)

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
        graph = hyper.graph
        heads = self.addressing_heads(graph, passage)
        base = graph.incidence_weights()
        factor = np.ones_like(base)
        terms = [(1.0, restart[0], restart[1])]
        versions = [question]
        trace: dict = {"heads": [list(h) for h in heads], "rounds": []}
        x_p, x_e = walk
        for k in range(self.rounds):
            top, _ = top_k_stable(x_p[None], self.read_top)
            context = self.read(graph, passage, top[0], versions[-1])
            step: dict = {"read": [graph.passage_ids[p] for p in context.passages], "targets": [], "rewrite": None}
            scores = np.zeros(0)
            if context.candidates:
                if self.target == "generated_name":
                    scores, step["generated_name"] = self.generated_target(
                        retriever, graph, context, passage, versions[-1]
                    )
                else:
                    scores = entity_pointer(pointer_scores(self.reader, context, heads), self.pointer)  # (C,)
                candidates = np.asarray(context.candidates)
                best = np.argsort(-scores, kind="stable")[:TOP_TARGETS]
                step["targets"] = [[graph.entities[candidates[c]], round(float(scores[c]), 6)] for c in best]
                if scores.sum() > 0:
                    r_e = np.zeros(graph.num_entities)
                    r_e[candidates] = scores / scores.sum()
                    terms.append((self.pointer_weight, np.zeros(graph.num_passages), r_e))
                    pointed = np.zeros(graph.num_entities)
                    pointed[candidates] = scores / scores.max()
                    read = np.concatenate([np.asarray(graph.incidences_of(p), int) for p in context.passages])
                    factor[read] = 1.0 + self.transition_gain * pointed[graph.incidence_entity[read]]
            if self.rewrite and k < self.rounds - 1:
                new = (
                    self.rewritten(retriever, graph, passage, context, scores, versions[-1], protected)
                    if scores.size
                    else None
                )
                step["rewrite"] = new.as_dict() if new is not None else "none"
                if new is not None:
                    versions.append(new.after)
                    r_p, r_e = retriever.restart_for(hyper, [new.after])
                    terms.append((self.rewrite_weight, r_p[:, 0], r_e[:, 0]))
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
