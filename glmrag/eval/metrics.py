"""Per-question QA metrics: exact match, token F1 and answer accuracy (contains match), with SQuAD answer
normalisation (GLM-RAG §5 and App. E). Retrieval metrics are in :mod:`glmrag.index.ranking_metrics`.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

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
