"""Per-question retrieval metrics: one question's ranked passage ids against its gold passages.

Each metric takes ranked passage ids (best first) and the gold ids and returns a number in [0, 1]. A
question without gold has no defined recall: these functions refuse it, and the evaluator excludes and
counts it. Ranks are list positions, so ties stay as the retriever broke them; a gold passage missing
from the list is not retrieved. The headline metrics are Recall@2 and Recall@5 (GLM-RAG §5). They sit
below the models floor because training validates with them; QA metrics are in :mod:`glmrag.eval.metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_KS: tuple[int, ...] = (1, 2, 5, 10)
"""Cut-offs reported by default; GLM-RAG reports Recall@2 (§5) and Recall@5 (App. D)."""


def _checked(ranked: Sequence[str], gold: Sequence[str]) -> set[str]:
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("retrieval metrics are undefined for a question with no gold passages; exclude it")
    if len(set(ranked)) != len(ranked):
        raise ValueError("ranked passage list has duplicate ids; a ranking must list each passage at most once")
    return gold_set


def recall_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """|top-k ∩ gold| / |gold| (as torchmetrics' ``RetrievalRecall``)."""
    gold_set = _checked(ranked, gold)
    return len(gold_set.intersection(ranked[:k])) / len(gold_set)


def filtered_recall_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Fraction of gold passages whose *filtered* rank is at most ``k``.

    This is GFM-RAG's training-time metric: each gold passage is ranked only
    against the non-gold passages, so its filtered rank is 1 + the number of
    non-gold passages ranked above it; the other gold passages never push it
    down. It therefore inflates recall (with two gold passages at positions 2
    and 3, Recall@2 is 0.5 but filtered Recall@2 is 1.0) and is reported
    labelled as filtered, never in place of :func:`recall_at_k`.
    """
    gold_set = _checked(ranked, gold)
    hits, non_gold_above = 0, 0
    for pid in ranked:
        if pid in gold_set:
            hits += non_gold_above + 1 <= k
        else:
            non_gold_above += 1
            if non_gold_above >= k:
                break
    return hits / len(gold_set)


def hits_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """1.0 if any gold passage is in the top ``k``, else 0.0 (torchmetrics' ``RetrievalHitRate``)."""
    gold_set = _checked(ranked, gold)
    return float(not gold_set.isdisjoint(ranked[:k]))


def all_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """1.0 if every gold passage is in the top ``k``, else 0.0."""
    gold_set = _checked(ranked, gold)
    return float(gold_set.issubset(ranked[:k]))


def reciprocal_rank(ranked: Sequence[str], gold: Sequence[str]) -> float:
    """1 / (1-based position of the first gold passage); 0.0 if none is ranked."""
    gold_set = _checked(ranked, gold)
    for position, pid in enumerate(ranked, start=1):
        if pid in gold_set:
            return 1.0 / position
    return 0.0


def retrieval_metrics(ranked: Sequence[str], gold: Sequence[str], ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """All retrieval metrics of one question, keyed ``recall@k``, ``filtered_recall@k``,
    ``hits@k``, ``all@k`` for each ``k`` in ``ks``, and ``mrr``. Raises on empty gold."""
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall@{k}"] = recall_at_k(ranked, gold, k)
    for k in ks:
        out[f"filtered_recall@{k}"] = filtered_recall_at_k(ranked, gold, k)
    for k in ks:
        out[f"hits@{k}"] = hits_at_k(ranked, gold, k)
    for k in ks:
        out[f"all@{k}"] = all_at_k(ranked, gold, k)
    out["mrr"] = reciprocal_rank(ranked, gold)
    return out


def retrieval_metric_names(ks: Sequence[int] = DEFAULT_KS) -> list[str]:
    """The keys :func:`retrieval_metrics` returns, in its order."""
    return [f"{m}@{k}" for m in ("recall", "filtered_recall", "hits", "all") for k in ks] + ["mrr"]
