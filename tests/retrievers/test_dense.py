import numpy as np
import pytest

from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.embed import passage_text
from glmrag.retrievers.base import Retriever
from glmrag.retrievers.dense import DenseRetriever

CORPUS = Corpus(
    [
        Passage.make("Photosynthesis", "Plants convert sunlight, water and carbon dioxide into sugar and oxygen."),
        Passage.make("Paris", "Paris is the capital and largest city of France, on the river Seine."),
        Passage.make("Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
        Passage.make(
            "Python (programming language)", "Python is a high-level programming language created by Guido van Rossum."
        ),
    ]
)
QUESTIONS = [
    Question("q0", "What is the capital city of France?", ("Paris",), (CORPUS[1].id,)),
    Question("q1", "Which mountain is the highest on Earth?", ("Mount Everest",), (CORPUS[2].id,)),
    Question("q2", "Who created the Python programming language?", ("Guido van Rossum",), (CORPUS[3].id,)),
]


@pytest.fixture(scope="module")
def dense():
    """One retriever for the module: the MiniLM model loads once (about 5 s)."""
    return DenseRetriever()


def test_obvious_questions_find_their_passage(dense):
    rankings = dense.retrieve(QUESTIONS, None, CORPUS, top_k=3)
    assert [r.passage_ids[0] for r in rankings] == [q.supporting[0] for q in QUESTIONS]
    for r in rankings:
        assert len(r.passage_ids) == 3 and len(set(r.passage_ids)) == 3
        assert r.passage_scores == sorted(r.passage_scores, reverse=True)
        assert 0.3 < r.passage_scores[0] <= 1.0 + 1e-6
    assert isinstance(dense, Retriever) and dense.name == "dense"


def test_scores_are_cosines_of_title_and_text(dense):
    (ranking,) = dense.retrieve(QUESTIONS[:1], None, CORPUS, top_k=10)
    assert len(ranking.passage_ids) == len(CORPUS)  # top_k capped at the corpus size
    question = dense.embedder.encode([QUESTIONS[0].question])[0]
    passages = dense.embedder.encode([passage_text(CORPUS[CORPUS.position(pid)]) for pid in ranking.passage_ids])
    assert ranking.passage_scores == pytest.approx((passages @ question).tolist(), abs=1e-5)
    assert passage_text(CORPUS[1]).startswith("Paris\nParis is")


def test_passage_matrix_cached_in_memory_and_on_disk(dense, tmp_path, monkeypatch):
    assert dense.passage_matrix(CORPUS) is dense.passage_matrix(CORPUS)
    stored = DenseRetriever(cache_dir=tmp_path)
    matrix = stored.passage_matrix(CORPUS)
    assert len(list(tmp_path.glob("dense-*.cache"))) == 1
    reloaded = DenseRetriever(cache_dir=tmp_path)

    def no_encoding(texts):
        raise AssertionError("passages should come from the cache file")

    monkeypatch.setattr(reloaded.embedder, "encode", no_encoding)
    assert np.array_equal(reloaded.passage_matrix(CORPUS), matrix)
    assert matrix.shape == (4, 384) and np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
