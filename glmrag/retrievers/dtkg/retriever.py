"""DTKG (Dual-Track KG-verified reasoning) as a retriever of the shared evaluator.

Per question the router (DTKG §3.2, or a fixed mode of Table 2) picks the parallel fact-checking track
(§3.3.1) or the chained reasoning track (§3.3.2); both share the two-stage scorer (Eqs. 6-7) and the
denoiser (§3.4). The track's answer goes to :attr:`DTKGRetriever.answers`; the passages of the triples it
used head the ranking, and dense order fills the rest. Every tunable is a field of
:class:`~glmrag.retrievers.dtkg.settings.DTKGSettings`; the KG is the dataset's OpenIE index (the paper's
is Wikidata, docs/fidelity.md).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from glmrag.data.types import Corpus, Question
from glmrag.index.embed import DEFAULT_MODEL, passage_text
from glmrag.index.kg import KGIndex
from glmrag.llm.base import LLM, Usage
from glmrag.progress import progress
from glmrag.retrievers.base import Ranking, checked_settings
from glmrag.retrievers.dense import DenseRetriever
from glmrag.retrievers.dtkg.chain import ChainTrack
from glmrag.retrievers.dtkg.classifier import TrackRouter
from glmrag.retrievers.dtkg.denoise import Denoiser
from glmrag.retrievers.dtkg.evidence import TrackResult
from glmrag.retrievers.dtkg.linking import EntityLinker
from glmrag.retrievers.dtkg.parallel import ParallelTrack
from glmrag.retrievers.dtkg.ranking import rank_passages, used_passages
from glmrag.retrievers.dtkg.rerank import Reranker, make_reranker
from glmrag.retrievers.dtkg.scoring import TextEmbeddings, TwoStageScorer
from glmrag.retrievers.dtkg.settings import DTKGSettings

log = logging.getLogger(__name__)


def question_rng(seed: int, question_id: str) -> np.random.Generator:
    """A generator that depends only on ``seed`` and the question."""
    return np.random.default_rng([seed, zlib.crc32(question_id.encode())])


class DTKGRetriever:
    """DTKG: classify, run the chosen track over the KG, answer, and rank the passages it used first.

    Args:
        llm: the language model of every step (passed in, e.g. ``configs/llm/local.yaml``).
        settings: every tunable (modes of DTKG Tables 2-4, paper constants); default :class:`DTKGSettings`.
        embed_model: sentence-transformers name or path of ``h(.)`` (Eq. 6) and the dense fill.
        reranker: ``"llm"`` (listwise by ``llm``, App. A.4), a cross-encoder name or path, or a Reranker.
        name: the method name (the usage tag and the system name in reports).
        seed: seeds the ``random`` mode and scoring, per question (:func:`question_rng`).
        cache_dir: where the dense passage embeddings are cached (shared with the ``dense`` baseline).
        encoder: any object with ``encode(texts) -> (N, d)`` unit rows in place of the embedder (tests).

    Every LLM call runs under ``llm.track(name, question.id)``; :meth:`llm_cost` gives what the last
    :meth:`retrieve` spent per question.
    """

    def __init__(
        self,
        llm: LLM,
        settings: DTKGSettings | None = None,
        embed_model: str = DEFAULT_MODEL,
        reranker: str | Reranker = "llm",
        name: str = "dtkg",
        seed: int = 0,
        cache_dir: str | Path | None = None,
        batch_size: int = 256,
        encoder=None,
    ) -> None:
        settings = checked_settings(
            DTKGSettings, settings, f"DTKGRetriever {name!r}", "settings", "configs/retriever/dtkg.yaml"
        )
        self.settings = settings
        self.llm, self.name, self.seed = llm, name, seed
        self.reranker = make_reranker(reranker, llm)
        self.dense = DenseRetriever(embed_model, batch_size=batch_size, cache_dir=cache_dir)
        self.encoder = encoder
        self.embed = TextEmbeddings(encoder if encoder is not None else self.dense.embedder)
        scorer = TwoStageScorer(self.embed, self.reranker, settings.candidates, settings.alpha, settings.scoring)
        denoiser = Denoiser(settings, llm)
        self.router = TrackRouter(llm, settings.mode, settings.classifier_labels)
        self.tracks = {
            "parallel": ParallelTrack(llm, self.settings, scorer, denoiser, self.linker),
            "chain": ChainTrack(llm, self.settings, scorer, denoiser, self.linker),
        }
        self.answers: dict[str, str] = {}
        self.results: dict[str, TrackResult] = {}
        self._linker: tuple[KGIndex, EntityLinker] | None = None
        self._cost: dict[str, Usage] = {}

    def linker(self, index: KGIndex) -> EntityLinker:
        """Eq. 5 over ``index``'s entity names, built on first use and kept while the same index is passed."""
        if self._linker is None or self._linker[0] is not index:
            self._linker = (index, EntityLinker(index.entities, self.settings.link_threshold))
        return self._linker[1]

    def passage_cosines(self, questions: Sequence[Question], corpus: Corpus) -> np.ndarray:
        """Dense cosines of questions and passages. Shapes: -> (B, P)."""
        if self.encoder is None:
            passages = self.dense.passage_matrix(corpus)  # (P, d), cached per corpus and model
        else:
            passages = np.asarray(self.encoder.encode([passage_text(p) for p in corpus]), dtype=np.float32)
        queries = self.embed([q.question for q in questions])  # (B, d)
        return queries @ passages.T

    def answer(self, question: Question, index: KGIndex) -> TrackResult:
        """Route one question and run its track (LLM calls tagged with the question)."""
        rng = question_rng(self.seed, question.id)
        with self.llm.track(self.name, question.id):
            track = self.router.route(question.question, rng)
            result = self.tracks[track].run(question, index, rng)
        result.trace["why"] = self.router.reason
        return result

    def retrieve(self, questions: Sequence[Question], index: KGIndex, corpus: Corpus, top_k: int = 10) -> list[Ranking]:
        """Answer every question (filling :attr:`answers`) and rank the passages of the triples used first."""
        before = self.llm.usage.by_question(self.name)
        self.answers, self.results = {}, {}
        cosines = self.passage_cosines(questions, corpus) if questions else np.zeros((0, len(corpus)))
        rankings = []
        for q, cosine in progress(
            zip(questions, cosines, strict=True), self.name, total=len(questions), unit="question"
        ):
            result = self.answer(q, index)
            self.answers[q.id], self.results[q.id] = result.answer, result
            rankings.append(rank_passages(q.id, used_passages(index, result.triples), cosine, corpus, top_k))
            log.debug("%s %s: %s track, %d triples used", self.name, q.id, result.track, len(result.triples))
        after = self.llm.usage.by_question(self.name)
        self._cost = {q.id: after.get(q.id, Usage()).since(before.get(q.id)) for q in questions}
        return rankings

    def llm_cost(self) -> dict[str, Usage]:
        """LLM usage per question id of the last :meth:`retrieve` (DTKG Table 6's cost, measured)."""
        return dict(self._cost)

    def traces(self) -> dict[str, dict]:
        """Question id -> what DTKG did in the last :meth:`retrieve`: the track and why, the Eq. 5 links with
        their similarity, the triples kept after each stage, the fallbacks taken (usage events) and the
        triples used (row -> score)."""
        out = {}
        for qid, result in self.results.items():
            t = result.trace
            keep = ("why", "links", "central_link", "triples", "checks", "facts", "supported")
            out[qid] = (
                {"track": result.track}
                | {k: t[k] for k in keep if k in t}
                | {
                    "fallbacks": dict(self._cost.get(qid, Usage()).events),
                    "used": {int(r): round(v, 4) for r, v in result.triples.items()},
                }
            )
        return out

    def trace_summary(self) -> dict[str, dict]:
        """Counts over :meth:`traces` for the report: the track distribution, why (classifier or fallback),
        fallback events, unlinked mentions and questions that used no triple."""
        traces = self.traces().values()
        tracks: dict[str, int] = {}
        fallbacks: dict[str, int] = {}
        for t in traces:
            tracks[t["track"]] = tracks.get(t["track"], 0) + 1
            for name, n in t["fallbacks"].items():
                fallbacks[name] = fallbacks.get(name, 0) + n
        routed = {
            "classifier": sum(t["why"].startswith("classifier:") for t in traces),
            "classifier_fallback": sum(t["why"].startswith("classifier fallback") for t in traces),
        }
        return {
            "tracks": tracks,
            "routing": routed,
            "fallbacks": fallbacks,
            "questions_without_triples": {"count": sum(not t["used"] for t in traces)},
        }
