import numpy as np
import pytest
import torch
from torchmetrics.retrieval import RetrievalHitRate, RetrievalMRR, RetrievalRecall

from glmrag.eval.metrics import exact_match, normalize_answer, qa_metrics, token_f1
from glmrag.index.ranking_metrics import (
    all_at_k,
    filtered_recall_at_k,
    hits_at_k,
    recall_at_k,
    reciprocal_rank,
    retrieval_metric_names,
    retrieval_metrics,
)

RANKED = ["x", "g1", "y", "g2", "z"]
GOLD = ["g1", "g2", "g3"]  # g3 never retrieved


@pytest.mark.parametrize(("k", "expected"), [(1, 0.0), (2, 1 / 3), (3, 1 / 3), (4, 2 / 3), (10, 2 / 3)])
def test_recall_hand_made(k, expected):
    assert recall_at_k(RANKED, GOLD, k) == pytest.approx(expected)


@pytest.mark.parametrize(("k", "expected"), [(1, 0.0), (2, 1 / 3), (3, 2 / 3), (10, 2 / 3)])
def test_filtered_recall_hand_made(k, expected):
    # filtered ranks: g1 = 1 + 1 non-gold above = 2; g2 = 1 + 2 = 3; g3 absent
    assert filtered_recall_at_k(RANKED, GOLD, k) == pytest.approx(expected)


def test_filtered_recall_inflates_recall():
    ranked, gold = ["x", "g1", "g2"], ["g1", "g2"]
    assert recall_at_k(ranked, gold, 2) == 0.5
    assert filtered_recall_at_k(ranked, gold, 2) == 1.0


def test_hits_all_mrr_hand_made():
    assert [hits_at_k(RANKED, GOLD, k) for k in (1, 2, 5)] == [0.0, 1.0, 1.0]
    assert all_at_k(RANKED, GOLD, 5) == 0.0
    assert all_at_k(RANKED, ["g1", "g2"], 4) == 1.0 and all_at_k(RANKED, ["g1", "g2"], 3) == 0.0
    assert reciprocal_rank(RANKED, GOLD) == 0.5
    assert reciprocal_rank(["x", "y"], GOLD) == 0.0


def test_retrieval_metrics_keys_and_refusals():
    out = retrieval_metrics(RANKED, GOLD, ks=(2, 5))
    assert list(out) == retrieval_metric_names((2, 5))
    assert out["mrr"] == 0.5 and out["recall@5"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no gold"):
        recall_at_k(RANKED, [], 2)
    with pytest.raises(ValueError, match="duplicate"):
        recall_at_k(["g1", "g1"], GOLD, 2)


def _random_queries(n_queries=50, n_passages=20, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n_queries):
        scores = rng.random(n_passages)  # continuous: no ties
        target = np.zeros(n_passages, dtype=bool)
        target[rng.choice(n_passages, size=rng.integers(1, 5), replace=False)] = True
        yield scores, target


def _ranked_and_gold(scores, target):
    order = np.argsort(-scores)
    return [f"p{i}" for i in order], [f"p{i}" for i in np.flatnonzero(target)]


HAND_MADE = [  # (scores, target): gold first, last, tied-free middle
    (np.array([0.9, 0.5, 0.4, 0.1]), np.array([True, False, False, False])),
    (np.array([0.9, 0.5, 0.4, 0.1]), np.array([False, False, False, True])),
    (np.array([0.2, 0.8, 0.6, 0.7, 0.1]), np.array([True, False, True, False, True])),
]


@pytest.mark.parametrize("queries", ["random", "hand_made"])
@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_against_torchmetrics(queries, k):
    data = list(_random_queries()) if queries == "random" else HAND_MADE
    preds = torch.tensor(np.concatenate([s for s, _ in data]), dtype=torch.float64)
    target = torch.tensor(np.concatenate([t for _, t in data]))
    indexes = torch.tensor(np.concatenate([np.full(len(s), i) for i, (s, _) in enumerate(data)]))
    ours = {"recall": [], "hits": [], "mrr": []}
    for scores, tgt in data:
        ranked, gold = _ranked_and_gold(scores, tgt)
        ours["recall"].append(recall_at_k(ranked, gold, k))
        ours["hits"].append(hits_at_k(ranked, gold, k))
        ours["mrr"].append(reciprocal_rank(ranked, gold))
    ref = {
        "recall": RetrievalRecall(top_k=k)(preds, target, indexes=indexes),
        "hits": RetrievalHitRate(top_k=k)(preds, target, indexes=indexes),
        "mrr": RetrievalMRR()(preds, target, indexes=indexes),
    }
    for name, values in ours.items():
        assert np.mean(values) == pytest.approx(float(ref[name]), abs=1e-6), name


@pytest.mark.parametrize("k", [1, 2, 5])
def test_filtered_recall_against_score_definition(k):
    # filtered rank of a gold passage = 1 + number of non-gold passages scored above it
    for scores, target in _random_queries(seed=1):
        ranked, gold = _ranked_and_gold(scores, target)
        ranks = [1 + int((scores[~target] > s).sum()) for s in scores[target]]
        assert filtered_recall_at_k(ranked, gold, k) == pytest.approx(np.mean([r <= k for r in ranks]))
        assert filtered_recall_at_k(ranked, gold, k) >= recall_at_k(ranked, gold, k)


def test_normalize_answer():
    assert normalize_answer("  The Eiffel-Tower, Paris! ") == "eiffeltower paris"
    assert normalize_answer("An apple a day") == "apple day"


def test_exact_match_and_f1_over_aliases():
    answers = ("The Beatles", "Fab Four")
    assert exact_match("beatles", answers) == 1.0
    assert exact_match("the fab four.", answers) == 1.0
    assert exact_match("Beatles band", answers) == 0.0
    # "the fab four band" vs "fab four": precision 2/3, recall 1 -> F1 0.8; vs "beatles": 0
    assert token_f1("the fab four band", answers) == pytest.approx(0.8)
    assert token_f1("Paris France", ("Paris",)) == pytest.approx(2 / 3)
    assert token_f1("London", ("Paris",)) == 0.0
    assert token_f1("", ("Paris",)) == 0.0
    assert qa_metrics("Fab Four", answers) == {"em": 1.0, "f1": 1.0, "acc": 1.0}
