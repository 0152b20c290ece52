"""One evaluator for every retriever: per-question metrics, CIs, breakdowns, tests.

:func:`evaluate` takes the :class:`~glmrag.retrievers.base.Ranking` lists of
several systems on the same questions and returns an :class:`EvalResult`;
:func:`~glmrag.eval.outputs.write_outputs` (re-exported here) writes it as
``metrics.json``, ``per_question.jsonl`` and ``results.md``.

Questions without gold passages have no retrieval metrics and are excluded
from them (and from the groupings), but counted; QA metrics, when predicted
answers are given, cover every question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.data.types import Question
from glmrag.eval import breakdowns as bd
from glmrag.eval.metrics import qa_metrics
from glmrag.eval.outputs import format_markdown, write_outputs  # re-exported
from glmrag.eval.result import EvalResult, EvalSettings
from glmrag.eval.significance import LEVEL, MIN_PAIRED, N_BOOT, bootstrap_ci, compare_to_reference, untested_metrics
from glmrag.index.kg import KGIndex
from glmrag.index.ranking_metrics import DEFAULT_KS, retrieval_metric_names, retrieval_metrics
from glmrag.retrievers.base import Ranking

__all__ = ["EvalResult", "EvalSettings", "evaluate", "format_markdown", "write_outputs"]

QA_METRICS = ("em", "f1", "acc")
ANALYSIS_METRICS = ("entity_cosine", "entity_hops")
GROUPINGS = ("n_supporting", "hops", "depth", "density")
TOP_PASSAGES = 10
"""Ranked passage ids kept per question in ``per_question.jsonl`` (more if a k is larger)."""


def _align(
    rankings_by_system: Mapping[str, Sequence[Ranking]], questions: Sequence[Question]
) -> dict[str, list[Ranking]]:
    """Each system's rankings in question order; raises unless every system covers exactly the questions."""
    if not rankings_by_system:
        raise ValueError("evaluate() needs rankings of at least one system")
    qids = [q.id for q in questions]
    if len(set(qids)) != len(qids):
        dup = next(q for q in qids if qids.count(q) > 1)
        raise ValueError(f"question id {dup!r} occurs more than once in the questions; ids must be unique")
    wanted = set(qids)
    aligned: dict[str, list[Ranking]] = {}
    for system, rankings in rankings_by_system.items():
        by_id: dict[str, Ranking] = {}
        for r in rankings:
            if r.question_id in by_id:
                raise ValueError(f"system {system!r} has two rankings for question {r.question_id!r}; give one")
            by_id[r.question_id] = r
        missing, extra = sorted(wanted - by_id.keys()), sorted(by_id.keys() - wanted)
        if missing or extra:
            raise ValueError(
                f"system {system!r} has rankings for {len(by_id)} questions, {len(missing)} of the {len(qids)} "
                f"questions missing (e.g. {missing[:3]}) and {len(extra)} unknown (e.g. {extra[:3]}); all "
                "systems must be ranked on the same questions: rerun them on one question set or subset it first"
            )
        aligned[system] = [by_id[q] for q in qids]
    return aligned


def _question_vectors(question_embeddings, questions: Sequence[Question]) -> list[np.ndarray | None]:
    if question_embeddings is None:
        return [None] * len(questions)
    if isinstance(question_embeddings, Mapping):
        return [question_embeddings.get(q.id) for q in questions]
    emb = np.asarray(question_embeddings)
    if emb.ndim != 2 or emb.shape[0] != len(questions):
        raise ValueError(
            f"question_embeddings has shape {emb.shape}; expected ({len(questions)}, d), a row per question"
        )
    return list(emb)


def _check_answers(answers_by_system: Mapping[str, Mapping[str, str]], systems: Sequence[str], qids: list[str]) -> None:
    for system, answers in answers_by_system.items():
        if system not in systems:
            raise ValueError(f"answers given for system {system!r}, which has no rankings; systems are {list(systems)}")
        missing = [q for q in qids if q not in answers]
        if missing:
            raise ValueError(
                f"system {system!r} lacks predicted answers for {len(missing)} questions (e.g. {missing[:3]})"
            )


@dataclass(frozen=True)
class _Context:
    """Per-question facts shared by all systems."""

    index: KGIndex
    ks: tuple[int, ...]
    features: list[bd.QuestionFeatures]
    density_label: dict[int, str]
    distances: list[dict[int, int]]
    q_vectors: list[np.ndarray | None]
    entity_k: int
    evaluated: list[int]
    """Positions of the questions with gold passages."""


def _system_rows(
    system: str,
    questions: Sequence[Question],
    rankings: Sequence[Ranking],
    answers: Mapping[str, str] | None,
    ctx: _Context,
) -> list[dict]:
    """One row per question: ids, top passages, buckets and every metric (None where undefined)."""
    retrieval_names = retrieval_metric_names(ctx.ks)
    top_n = max(TOP_PASSAGES, max(ctx.ks, default=0))
    rows = []
    for i, (q, r) in enumerate(zip(questions, rankings, strict=True)):
        f = ctx.features[i]
        row: dict = {
            "system": system,
            "question_id": q.id,
            "top_passages": list(r.passage_ids[:top_n]),
            "n_supporting": f.n_supporting,
            "hops": f.hops,
            "depth": f.depth,
            "depth_bucket": f.depth_bucket,
            "density": f.density,
            "density_bucket": ctx.density_label.get(i),
        }
        retrieval = retrieval_metrics(r.passage_ids, q.supporting, ctx.ks) if q.supporting else {}
        row.update({m: retrieval.get(m) for m in retrieval_names})
        qa = qa_metrics(answers[q.id], q.answers) if answers is not None else {}
        row.update({m: qa.get(m) for m in QA_METRICS})
        vector = ctx.q_vectors[i]
        row["entity_cosine"] = None if vector is None else bd.entity_cosine(r, vector, ctx.index, k=ctx.entity_k)
        row["entity_hops"] = bd.entity_hop_distance(r, ctx.index, k=ctx.entity_k, distances=ctx.distances[i])
        rows.append(row)
    return rows


def _defined_scores(rows: Sequence[dict], names: Sequence[str]) -> dict[str, np.ndarray]:
    """Metric -> (n_defined,) values over the rows where it is defined; metrics defined nowhere are left out."""
    scores = {m: np.array([row[m] for row in rows if row[m] is not None], dtype=np.float64) for m in names}
    return {m: v for m, v in scores.items() if v.size}


def evaluate(
    rankings_by_system: Mapping[str, Sequence[Ranking]],
    questions: Sequence[Question],
    index: KGIndex,
    ks: Sequence[int] = DEFAULT_KS,
    reference: str | None = None,
    question_embeddings: np.ndarray | Mapping[str, np.ndarray] | None = None,
    n_boot: int = N_BOOT,
    seed: int = 0,
    answers_by_system: Mapping[str, Mapping[str, str]] | None = None,
    test_metrics: Sequence[str] | None = None,
    test: str = "bootstrap",
    entity_k: int = bd.ENTITY_K,
    min_paired: int = MIN_PAIRED,
) -> EvalResult:
    """Measure every system on the same questions.

    Args:
        rankings_by_system: system name -> one Ranking per question (any order).
        questions: the evaluated questions; rankings must cover exactly these.
        index: the KG index the rankings were made on (seeds, entity graph, embeddings).
        ks: cut-offs of the @k metrics.
        reference: system every other one is tested against (GLM-RAG App. H); None: no tests.
        question_embeddings: (Q, d) rows in question order, or question id -> (d,), for the
            entity-cosine measure (§6.1); None skips it.
        n_boot, seed: bootstrap resamples and seed, shared by all CIs and tests (so they are paired).
        answers_by_system: system -> question id -> predicted answer; adds EM and F1.
        test_metrics: metrics tested against the reference; default Recall@2 and Recall@5
            (App. H, Table 22), or Recall@ks[0] when neither k is evaluated.
        test: "bootstrap" (App. H) or "permutation".
        entity_k: top-k retrieved entities of the analysis measures.
        min_paired: fewest paired questions a metric is tested on (below it: no test, no marker).
    """
    ks = tuple(sorted(set(int(k) for k in ks)))
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive cut-offs, got {ks}")
    aligned = _align(rankings_by_system, questions)
    systems = list(aligned)
    if reference is not None and reference not in aligned:
        raise ValueError(f"reference system {reference!r} has no rankings; systems are {systems}")
    qids = [q.id for q in questions]
    answers_by_system = answers_by_system or {}
    _check_answers(answers_by_system, systems, qids)

    context = _question_context(questions, index, ks, question_embeddings, entity_k)
    per_question = {
        system: _system_rows(system, questions, rankings, answers_by_system.get(system), context)
        for system, rankings in aligned.items()
    }
    names = retrieval_metric_names(ks) + (list(QA_METRICS) if answers_by_system else []) + list(ANALYSIS_METRICS)
    # Same seed and same n => same resamples, so each metric's CIs are paired across systems.
    scores = {s: _defined_scores(rows, names) for s, rows in per_question.items()}
    overall = {
        s: {m: bootstrap_ci(v, n_boot, seed) for m, v in metric_scores.items()} for s, metric_scores in scores.items()
    }
    names = [m for m in names if any(m in overall[s] for s in systems)]
    # Analysis measures are defined on system-dependent questions, so they cannot be paired.
    testable = [m for m in names if m not in ANALYSIS_METRICS]
    if test_metrics is None:
        test_metrics = _default_test_metrics(ks, testable, any_gold=bool(context.evaluated))
    significance, untested = _significance(scores, reference, test_metrics, testable, n_boot, seed, test, min_paired)

    n_gold = len(context.evaluated)
    return EvalResult(
        systems=systems,
        reference=reference,
        ks=ks,
        question_ids=qids,
        per_question=per_question,
        overall=overall,
        breakdowns=_breakdowns(per_question, names, context, n_boot, seed),
        significance=significance,
        counts={"questions": len(qids), "evaluated": n_gold, "excluded_no_gold": len(qids) - n_gold},
        metric_names=names,
        settings=EvalSettings(
            n_boot=n_boot,
            seed=seed,
            level=LEVEL,
            test=test,
            tested_metrics=list(test_metrics),
            correction="holm-bonferroni",
            min_paired=min_paired,
            untested_metrics=untested,
            entity_k=entity_k,
            bfs_cutoff=bd.BFS_CUTOFF,
            density_hops=bd.DENSITY_HOPS,
        ),
        warnings=[w for system, rankings in aligned.items() if (w := unranked_warning(system, rankings))],
    )


def unranked_warning(system: str, rankings: Sequence[Ranking]) -> str | None:
    """A warning when ``system`` ranked no question: every question's passage scores are tied or not finite,
    so its order is the order it listed passages in, and its row measures nothing (None otherwise). One question
    like that is no sign (no seed entity, no shared word); all of them are a broken or untrained model."""
    for ranking in rankings:
        scores = np.asarray(ranking.passage_scores, dtype=float)
        finite = scores[np.isfinite(scores)]
        if len(finite) and finite.max() > finite.min():
            return None
    return (
        f"{system}: every question's passage scores are tied or not finite, so its passages are in no ranked "
        "order and its row measures nothing; check the model or its checkpoint"
    )


def _question_context(
    questions: Sequence[Question],
    index: KGIndex,
    ks: tuple[int, ...],
    question_embeddings: np.ndarray | Mapping[str, np.ndarray] | None,
    entity_k: int,
) -> _Context:
    """The per-question facts every system's rows share: features, buckets, seed distances, vectors."""
    distances = [bd.seed_distances(index, q.id) for q in questions]
    features = bd.question_features(questions, index, distances)
    evaluated = [i for i, q in enumerate(questions) if q.supporting]
    density_label = dict(zip(evaluated, bd.density_terciles([features[i].density for i in evaluated]), strict=True))
    q_vectors = _question_vectors(question_embeddings, questions)
    return _Context(index, ks, features, density_label, distances, q_vectors, entity_k, evaluated)


def _breakdowns(
    per_question: Mapping[str, list[dict]], names: Sequence[str], ctx: _Context, n_boot: int, seed: int
) -> dict[str, dict[str, dict[str, dict]]]:
    """Grouping -> system -> bucket -> means and their bootstrap CIs, over the questions with gold passages."""
    evaluated, features = ctx.evaluated, ctx.features
    buckets = {
        "n_supporting": [features[i].supporting_bucket for i in evaluated],
        "hops": [features[i].hops_bucket for i in evaluated],
        "depth": [features[i].depth_bucket for i in evaluated],
        "density": [ctx.density_label[i] for i in evaluated],
    }
    grouped: dict[str, dict[str, dict[str, dict]]] = {g: {} for g in GROUPINGS}
    for s, rows in per_question.items():
        values = {m: [rows[i][m] for i in evaluated] for m in names}
        for g in GROUPINGS:
            grouped[g][s] = bd.group_means(values, buckets[g], n_boot, seed)
    return grouped


def _significance(
    scores: Mapping[str, dict[str, np.ndarray]],
    reference: str | None,
    test_metrics: Sequence[str],
    testable: Sequence[str],
    n_boot: int,
    seed: int,
    test: str,
    min_paired: int,
) -> tuple[list, dict]:
    """Paired tests of every system against ``reference`` (Holm-corrected), and the metrics left untested for
    want of ``min_paired`` shared questions; nothing without a reference."""
    if reference is None:
        return [], {}
    unknown = [m for m in test_metrics if m not in testable]
    if unknown:
        raise ValueError(f"test_metrics {unknown} cannot be tested; metrics on shared questions are {list(testable)}")
    significance = compare_to_reference(scores, reference, test_metrics, n_boot, seed, test, min_paired)
    return significance, untested_metrics(scores, reference, test_metrics, min_paired)


def _default_test_metrics(ks: tuple[int, ...], testable: Sequence[str], any_gold: bool) -> list[str]:
    """Recall@2 and Recall@5 (GLM-RAG App. H, Table 22), else Recall@ks[0]; without any gold passage, only
    those still testable (the rankings are written all the same)."""
    wanted = [f"recall@{k}" for k in (2, 5) if k in ks] or [f"recall@{ks[0]}"]
    return wanted if any_gold else [m for m in wanted if m in testable]
