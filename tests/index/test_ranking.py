import numpy as np
import pytest
import torch

from glmrag.index.ranking import (
    RANKERS,
    idf_weights,
    make_rankings,
    passage_scores,
    rank_passages,
    top_k_stable,
)

# p0: e0 e1 | p1: e1 e2 | p2: e3 | p3: none; e4 is in no passage.
PASSAGES = [[0, 1], [1, 2], [3], []]
SCORES = np.array([0.9, 0.8, 0.1, 0.5, 1.0])


@pytest.fixture
def tiny(kg):
    return kg([(0, 0, 1)], num_entities=5, passages=PASSAGES)


def test_idf_weights(tiny):
    assert idf_weights(tiny).tolist() == [1.0, 0.5, 1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "method, top_entities, expected",
    [
        ("idf_topk", 2, [1.0, 0.0, 0.0, 0.0]),  # e4 (weight 0) and e0
        ("idf_topk", 3, [1.5, 0.5, 0.0, 0.0]),  # + e1 (weight 1/2)
        ("idf_topk_scored", 3, [0.9 + 0.4, 0.4, 0.0, 0.0]),
        ("topk", 3, [2.0, 1.0, 0.0, 0.0]),
        ("simple", 3, [1.7, 0.9, 0.5, 0.0]),
    ],
)
def test_rankers_hand_computed(tiny, method, top_entities, expected):
    assert passage_scores(SCORES, tiny, method, top_entities) == pytest.approx(expected)


def test_softmax_sum_sums_each_passages_entity_probabilities(tiny):
    e = np.exp(SCORES)
    p = e / e.sum()  # softmax over all five entities, e4 (in no passage) included
    expected = [p[0] + p[1], p[1] + p[2], p[3], 0.0]
    assert passage_scores(SCORES, tiny, "softmax_sum") == pytest.approx(expected)
    masked = np.array([0.9, -np.inf, 0.1, 0.5, -np.inf])  # a masked entity has probability 0
    e = np.exp(np.where(np.isinf(masked), -np.inf, masked))
    p = e / e.sum()
    assert passage_scores(masked, tiny, "softmax_sum") == pytest.approx([p[0], p[2], p[3], 0.0])
    assert passage_scores(np.full(5, -np.inf), tiny, "softmax_sum") == pytest.approx([0.0] * 4)  # nothing scored


def test_ranking_breaks_ties_by_corpus_order(tiny):
    positions, scores = rank_passages(SCORES[None], tiny, top_k_passages=4, method="idf_topk", top_entities=2)
    assert positions.tolist() == [[0, 1, 2, 3]] and scores.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    positions, _ = rank_passages(SCORES[None], tiny, top_k_passages=10, method="simple")
    assert positions.tolist() == [[0, 1, 2, 3]]  # k is capped at the number of passages


def test_top_k_stable_ties_and_masks():
    row = np.array([[1.0, 3.0, 3.0, 2.0, 3.0]])
    assert top_k_stable(row, 2)[0].tolist() == [[1, 2]]
    assert top_k_stable(row, 4)[0].tolist() == [[1, 2, 4, 3]]
    assert top_k_stable(row, 9)[0].tolist() == [[1, 2, 4, 3, 0]]
    assert top_k_stable(row, 0)[0].shape == (1, 0)
    zeros = np.zeros((2, 50))
    zeros[1, 30] = 1.0
    assert top_k_stable(zeros, 3)[0].tolist() == [[0, 1, 2], [30, 0, 1]]
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, (20, 100)).astype(float)  # many ties
    positions, values = top_k_stable(scores, 7)
    for b in range(20):
        reference = sorted(range(100), key=lambda i: (-scores[b, i], i))[:7]
        assert positions[b].tolist() == reference and values[b].tolist() == scores[b, reference].tolist()


def test_masked_entities_are_never_selected(tiny):
    masked = np.array([-np.inf, -np.inf, 0.3, -np.inf, -np.inf])
    assert passage_scores(masked, tiny, "idf_topk", 3) == pytest.approx([0.0, 1.0, 0.0, 0.0])
    assert passage_scores(masked, tiny, "simple") == pytest.approx([0.0, 0.3, 0.0, 0.0])


def test_batch_equals_rows(random_graph):
    index = random_graph(300, 500, seed=1)
    scores = np.random.default_rng(1).random((6, index.num_entities))
    for method in RANKERS:
        batch = passage_scores(scores, index, method)
        for b in range(6):
            assert batch[b] == pytest.approx(passage_scores(scores[b], index, method))


def test_against_gfmrag_idf_topk_ranker(random_graph):
    """Reference: GFM-RAG's IDFWeightedTopKRanker (gfmrag/doc_rankers.py), written here in torch."""
    index = random_graph(300, 500, seed=2)
    scores = np.random.default_rng(2).random((5, index.num_entities))
    ent2doc = torch.tensor(index.entity_passages.toarray(), dtype=torch.float64)
    ent_pred = torch.tensor(scores)
    frequency = ent2doc.sum(dim=-1)
    idf = torch.where(frequency > 0, 1 / frequency, torch.zeros_like(frequency))
    top = torch.topk(ent_pred, 20, dim=-1)
    masked = torch.zeros_like(ent_pred).scatter_(1, top.indices, torch.gather(idf.expand(5, -1), 1, top.indices))
    reference = (masked @ ent2doc).numpy()
    assert np.allclose(passage_scores(scores, index, "idf_topk"), reference)


def test_make_rankings():
    positions = np.array([[2, 0]])
    rankings = make_rankings(
        ["q"], ["a", "b", "c"], positions, np.array([[0.5, 0.25]]), np.array([[7]]), np.array([[1.0]])
    )
    r = rankings[0]
    assert (r.question_id, r.passage_ids, r.passage_scores, r.entity_ids, r.entity_scores) == (
        "q",
        ["c", "a"],
        [0.5, 0.25],
        [7],
        [1.0],
    )


def test_unknown_ranker(tiny):
    with pytest.raises(ValueError, match="unknown passage ranker"):
        passage_scores(SCORES, tiny, "bm25")
