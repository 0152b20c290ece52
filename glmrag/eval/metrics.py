"""Per-question retrieval and QA metrics.

Retrieval metrics take one question's ranked passage ids (best first) and its
gold supporting passage ids, and return a number in [0, 1]. A question with no
gold passage has no defined recall; these functions refuse it and the
evaluator excludes (and counts) such questions. Ranks are list positions: a
retriever's scores only decide the order it returned, so ties are broken the
way the retriever broke them. A gold passage missing from the list counts as
not retrieved.

The headline metric is document-level Recall@2, with Recall@5 alongside
(GLM-RAG §5 "Evaluation metrics" and App. D); QA is exact match, with F1 in
App. E, both with SQuAD answer normalisation.
"""

from __future__ import annotations

import re
import string
from collections import Counter
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


# --- QA -------------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _token_f1(prediction: str, answer: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(answer).split()
    if not pred or not gold:
        # SQuAD v2 convention: an empty answer only matches an empty prediction.
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised answer alias, else 0.0."""
    norm = normalize_answer(prediction)
    return float(any(norm == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """SQuAD token-level F1 of the prediction, maximised over the answer aliases (0.0 with no aliases)."""
    return max((_token_f1(prediction, a) for a in answers), default=0.0)


def contains_match(prediction: str, answers: Sequence[str]) -> float:
    """ACC (contains): 1.0 if a normalised alias is the normalised prediction or a whole-word run in it
    (a stand-in for DTKG's similarity-model ACC, §4.1; see :mod:`glmrag.qa.accuracy`)."""
    said = f" {normalize_answer(prediction)} "
    return float(any(g and f" {g} " in said for g in (normalize_answer(a) for a in answers)))


def qa_metrics(prediction: str, answers: Sequence[str]) -> dict[str, float]:
    """``{"em", "f1", "acc"}`` of one predicted answer against the gold answer and its aliases."""
    return {
        "em": exact_match(prediction, answers),
        "f1": token_f1(prediction, answers),
        "acc": contains_match(prediction, answers),
    }
