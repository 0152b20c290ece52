import numpy as np
import pytest

from glmrag.eval.breakdowns import (
    density_terciles,
    entity_cosine,
    entity_depth,
    entity_hop_distance,
    group_means,
    question_features,
    seed_distances,
)
from glmrag.retrievers.base import Ranking


def test_entity_depth_hand_made(index, questions):
    depth = {q.id: entity_depth(index, q) for q in questions}
    assert depth == {"q_deep": 3, "q_near": 1, "q_far": None, "q_noseed": None, "q_nogold": None, "q_seedgold": 0}


def test_entity_depth_respects_cutoff(index, questions):
    q_deep = questions[0]
    assert entity_depth(index, q_deep, cutoff=2) == 2  # d (3 hops) is cut off; c (2 hops) remains
    assert entity_depth(index, q_deep, cutoff=1) is None


def test_question_features(index, questions):
    feats = question_features(questions, index)
    assert [f.supporting_bucket for f in feats] == ["2", "1", "1", "1", "0", "1"]
    assert [f.hops_bucket for f in feats] == ["2", "1", "1", "unknown", "2", "1"]
    assert [f.depth_bucket for f in feats] == ["3", "1", "unreachable", "unreachable", "unreachable", "0"]
    # triples within reach of the 1-hop ball of the seeds: {a} -> a-b, b-c; {b} and {a, b} -> + c-d
    assert [f.density for f in feats] == [2, 2, 2, 0, 3, 3]


def test_density_terciles_equal_sized_and_stable():
    assert density_terciles([5, 1, 9, 3, 7, 2]) == ["mid", "low", "high", "mid", "high", "low"]
    labels = density_terciles([0, 0, 0, 0, 1, 1, 1])  # ties keep input order across the cut
    assert labels == ["low", "low", "low", "mid", "mid", "high", "high"]
    assert density_terciles([]) == []


def test_group_means_orders_buckets_and_skips_none():
    metrics = {"recall@2": [1.0, 0.0, 0.5, None, 1.0], "mrr": [1.0, 0.5, 1.0, 0.25, None]}
    out = group_means(metrics, ["10", "unreachable", "2", "2", "10"])
    assert list(out) == ["2", "10", "unreachable"]
    assert out["2"] == {"n": 2, "recall@2": 0.5, "mrr": pytest.approx(0.625)}
    assert out["10"] == {"n": 2, "recall@2": 1.0, "mrr": 1.0}
    assert list(group_means({"m": [1, 2, 3]}, ["high", "low", "mid"])) == ["low", "mid", "high"]
    assert group_means({"m": [None]}, ["x"]) == {"x": {"n": 1, "m": None}}


def test_entity_cosine(index):
    # entities at 0°, 60°, 90°, 180°; question at 0° (any length)
    ranking = Ranking("q_near", ["p0"], [1.0], entity_ids=[0, 1, 2, 3], entity_scores=[4, 3, 2, 1])
    q = np.array([3.0, 0.0])
    assert entity_cosine(ranking, q, index, k=2) == pytest.approx((1 + 0.5) / 2)
    assert entity_cosine(ranking, q, index, k=4) == pytest.approx((1 + 0.5 + 0 - 1) / 4)
    assert entity_cosine(Ranking("q_near", ["p0"], [1.0]), q, index) is None
    with pytest.raises(ValueError, match="dimension"):
        entity_cosine(ranking, np.ones(3), index)


def test_entity_hop_distance(index):
    # seeds of q_near = {a}; d(a)=0, d(c)=2, d(d)=3, e unreachable
    ranking = Ranking("q_near", ["p0"], [1.0], entity_ids=[2, 4, 3, 0], entity_scores=[4, 3, 2, 1])
    assert entity_hop_distance(ranking, index, k=2) == 2.0
    assert entity_hop_distance(ranking, index, k=4) == pytest.approx((2 + 3 + 0) / 3)
    assert entity_hop_distance(ranking, index, k=4, cutoff=2) == pytest.approx(1.0)
    shared = seed_distances(index, "q_near")
    assert entity_hop_distance(ranking, index, k=4, distances=shared) == pytest.approx(5 / 3)
    assert entity_hop_distance(Ranking("q_noseed", [], [], entity_ids=[0], entity_scores=[1]), index) is None
    assert entity_hop_distance(Ranking("q_near", [], [], entity_ids=[4, 5], entity_scores=[1, 0]), index) is None
    assert entity_hop_distance(Ranking("q_near", [], []), index) is None
