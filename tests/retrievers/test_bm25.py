import logging
import math
from pathlib import Path

import bm25s
import numpy as np
import pytest
import Stemmer

from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.embed import passage_text
from glmrag.retrievers.base import Retriever
from glmrag.retrievers.bm25 import BM25Retriever

ROOT = Path(__file__).resolve().parents[2]

CORPUS = Corpus(
    [
        Passage.make("Photosynthesis", "Plants convert sunlight, water and carbon dioxide into sugar and oxygen."),
        Passage.make("Paris", "Paris is the capital and largest city of France, on the river Seine."),
        Passage.make("Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
        Passage.make(
            "Python (programming language)", "Python is a high-level programming language created by Guido van Rossum."
        ),
        Passage.make("Seine", "The Seine is a river that flows through Paris into the English Channel."),
        Passage.make(
            "Himalayas", "The Himalayas are a mountain range in Asia; their highest peaks exceed 8,000 metres."
        ),
    ]
)
QUESTIONS = [
    Question("q0", "What is the capital city of France?", ("Paris",), (CORPUS[1].id,)),
    Question("q1", "Which mountain is the highest on Earth?", ("Mount Everest",), (CORPUS[2].id,)),
    Question("q2", "Who created the Python programming language?", ("Guido van Rossum",), (CORPUS[3].id,)),
]


def question(text: str, qid: str = "q") -> Question:
    return Question(qid, text, (), ())


def score_row(retriever: BM25Retriever, corpus: Corpus, text: str) -> np.ndarray:
    """The retriever's score of every passage (corpus order) for one question."""
    (ranking,) = retriever.retrieve([question(text)], None, corpus, top_k=len(corpus))
    row = np.zeros(len(corpus))
    row[[corpus.position(pid) for pid in ranking.passage_ids]] = ranking.passage_scores
    return row


def test_obvious_questions_find_their_passage():
    bm25 = BM25Retriever()
    rankings = bm25.retrieve(QUESTIONS, None, CORPUS, top_k=3)
    assert [r.passage_ids[0] for r in rankings] == [q.supporting[0] for q in QUESTIONS]
    for r in rankings:
        assert len(r.passage_ids) == 3 and len(set(r.passage_ids)) == 3
        assert r.passage_scores == sorted(r.passage_scores, reverse=True) and r.passage_scores[0] > 0
    assert bm25.fallbacks == 0
    assert isinstance(bm25, Retriever) and bm25.name == "bm25"


REFERENCE_QUESTIONS = [
    "What is the capital city of France?",
    "Which river flows through Paris, the capital?",
    "highest mountain highest peak in the Himalayas",  # a repeated word counts twice
    "Who created the Python programming language in the Himalayas?",
]


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"k1": 1.2, "b": 0.3, "method": "robertson"},
        {"k1": 0.9, "b": 1.0, "method": "atire", "stopwords": None, "stemmer": None},
    ],
)
def test_scores_equal_bm25s_retrieve_on_title_and_text(settings):
    """bm25s's documented pipeline (bm25s.tokenize -> BM25.index -> BM25.retrieve) is the reference."""
    kwargs = {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": "english"} | settings
    stemmer = Stemmer.Stemmer(kwargs["stemmer"]) if kwargs["stemmer"] else None
    corpus = Corpus([*CORPUS, Passage.make("The", "It is.")])  # no word left: a passage of length 0
    texts = [passage_text(p) for p in corpus]
    reference = bm25s.BM25(k1=kwargs["k1"], b=kwargs["b"], method=kwargs["method"])
    reference.index(bm25s.tokenize(texts, stopwords=kwargs["stopwords"], stemmer=stemmer, show_progress=False))
    bm25 = BM25Retriever(**kwargs)
    for text in REFERENCE_QUESTIONS:
        tokens = bm25s.tokenize([text], stopwords=kwargs["stopwords"], stemmer=stemmer, return_ids=False)
        docs, values = reference.retrieve(tokens, k=len(corpus), show_progress=False)
        expected = np.zeros(len(corpus))
        expected[docs[0]] = values[0]
        assert expected.max() > 0
        assert score_row(bm25, corpus, text) == pytest.approx(expected, rel=1e-6, abs=1e-6)


# Passages whose tokens are known without the tokenizer (stopwords=None, stemmer=None): lower-cased runs of two or
# more word characters of "title\ntext"; one-letter words ("a") and punctuation are dropped.
TINY = Corpus(
    [
        Passage.make("Alpha", "beta beta, gamma."),
        Passage.make("Beta", "gamma delta delta delta a"),
        Passage.make("Gamma", "alpha"),
        Passage.make("Delta", "Epsilon epsilon epsilon epsilon epsilon beta!"),
        Passage.make("Zeta", "zeta"),
    ]
)
TINY_TOKENS = [
    ["alpha", "beta", "beta", "gamma"],
    ["beta", "gamma", "delta", "delta", "delta"],
    ["gamma", "alpha"],
    ["delta", "epsilon", "epsilon", "epsilon", "epsilon", "epsilon", "beta"],
    ["zeta", "zeta"],
]


def bm25_formula(query: list[str], method: str, k1: float, b: float) -> list[float]:
    """BM25 written out (Kamphuis et al., ECIR 2020, Table 1: the variants bm25s implements).

    lucene:    ln(1 + (N - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * dl / avgdl))
    robertson: ln((N - df + 0.5) / (df + 0.5)), floored at 0, times the same tf term
    atire:     ln(N / df) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
    """
    n = len(TINY_TOKENS)
    avgdl = sum(len(d) for d in TINY_TOKENS) / n
    out = []
    for doc in TINY_TOKENS:
        total = 0.0
        for term in query:
            tf = doc.count(term)
            df = sum(term in d for d in TINY_TOKENS)
            if tf == 0:
                continue
            norm = k1 * (1 - b + b * len(doc) / avgdl)
            if method == "lucene":
                total += math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + norm)
            elif method == "robertson":
                total += max(0.0, math.log((n - df + 0.5) / (df + 0.5))) * tf / (tf + norm)
            else:
                total += math.log(n / df) * tf * (k1 + 1) / (tf + norm)
        out.append(total)
    return out


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (1.2, 0.0), (3.0, 1.0)])
def test_scores_equal_the_bm25_formula_written_out(method, k1, b):
    bm25 = BM25Retriever(k1=k1, b=b, method=method, stopwords=None, stemmer=None)
    for text, query in [
        ("Beta and delta?", ["beta", "and", "delta"]),  # "and" is in no passage: it scores nothing
        ("epsilon gamma gamma", ["epsilon", "gamma", "gamma"]),
        ("ALPHA", ["alpha"]),
    ]:
        expected = bm25_formula(query, method, k1, b)
        assert any(expected)
        assert score_row(bm25, TINY, text) == pytest.approx(expected, rel=1e-6, abs=1e-6)


def test_the_method_changes_the_scores():
    rows = {m: score_row(BM25Retriever(method=m), CORPUS, QUESTIONS[0].question) for m in ("lucene", "atire")}
    assert rows["atire"] == pytest.approx(2.5 * rows["lucene"], rel=0.3)  # atire keeps (k1 + 1) = 2.5
    assert not np.allclose(rows["atire"], rows["lucene"])
    with pytest.raises(ValueError, match="bm25l"):
        BM25Retriever(method="bm25l")


def top(retriever: BM25Retriever, corpus: Corpus, text: str) -> str:
    """Title of the best passage."""
    (ranking,) = retriever.retrieve([question(text)], None, corpus, top_k=1)
    return corpus[corpus.position(ranking.passage_ids[0])].title


def test_k1_saturates_term_frequency():
    # "xx" four times against "xx" and "yy" once each, passages of equal length: a small k1 makes tf nearly binary
    # (two matched words win), a large one nearly linear (four occurrences win)
    corpus = Corpus(
        [
            Passage.make("t1", "xx xx xx xx"),
            Passage.make("t2", "xx yy qq qq"),
            Passage.make("t3", "yy qq qq qq"),
            Passage.make("t4", "qq qq qq qq"),
            Passage.make("t5", "qq qq qq qq"),
        ]
    )
    assert top(BM25Retriever(k1=0.1, stopwords=None, stemmer=None), corpus, "xx yy") == "t2"
    assert top(BM25Retriever(k1=10.0, stopwords=None, stemmer=None), corpus, "xx yy") == "t1"


def test_b_normalises_passage_length():
    # one "xx" in a 2-token passage against two in a 13-token passage: b=0 counts occurrences, b=1 divides by length
    corpus = Corpus(
        [
            Passage.make("short", "xx"),
            Passage.make("long", "xx xx " + "qq " * 10),
            Passage.make("t3", "qq"),
            Passage.make("t4", "qq qq"),
        ]
    )
    assert top(BM25Retriever(b=0.0, stopwords=None, stemmer=None), corpus, "xx") == "long"
    assert top(BM25Retriever(b=1.0, stopwords=None, stemmer=None), corpus, "xx") == "short"


def test_the_stemmer_matches_inflections():
    corpus = Corpus(
        [
            Passage.make("Seine", "The Seine river flows through Paris."),
            Passage.make("Rivers of Europe", "A list of rivers."),
            Passage.make("Alps", "Mountains of Europe."),
            Passage.make("Rhine", "The Rhine flowing north."),
        ]
    )
    # stemmed, "rivers flowing" -> "river flow" matches the Seine twice; unstemmed, only the exact words match
    assert top(BM25Retriever(stemmer="english"), corpus, "Which rivers are flowing?") == "Seine"
    assert top(BM25Retriever(stemmer=None), corpus, "Which rivers are flowing?") == "Rivers of Europe"
    assert score_row(BM25Retriever(stemmer=None), corpus, "Which rivers are flowing?")[0] == 0.0
    with pytest.raises(ValueError, match="stemmer"):
        BM25Retriever(stemmer="klingon")


def test_stopwords_are_dropped_and_a_stopword_question_falls_back_to_corpus_order(caplog):
    corpus = Corpus(
        [
            Passage.make("Macbeth", "Tomorrow, and tomorrow, and tomorrow."),
            Passage.make("Hamlet", "To be, or not to be, that is the question."),
            Passage.make("Lear", "Nothing will come of nothing."),
        ]
    )
    questions = [question("To be or not to be?", "stop"), question("tomorrow", "word"), question("zzz", "unseen")]
    kept = BM25Retriever(stopwords=None)
    assert top(kept, corpus, "To be or not to be?") == "Hamlet" and kept.fallbacks == 0
    english = BM25Retriever(stopwords="en")  # to, be, or, not are all in the 33 English stop-words
    with caplog.at_level(logging.WARNING, logger="glmrag.retrievers.bm25"):
        stop, word, unseen = english.retrieve(questions, None, corpus, top_k=3)
    assert stop.passage_ids == corpus.ids and stop.passage_scores == [0.0, 0.0, 0.0]
    assert unseen.passage_ids == corpus.ids and unseen.passage_scores == [0.0, 0.0, 0.0]
    assert word.passage_ids[0] == corpus[0].id and word.passage_scores[0] > 0
    assert english.fallbacks == 2
    assert "2 of 3 questions have no indexed word" in caplog.text
    english.retrieve(questions[1:2], None, corpus)
    assert english.fallbacks == 0  # counts the last call only


def test_ties_go_to_corpus_order():
    first, second = Passage.make("aa", "xx yy"), Passage.make("bb", "xx yy")  # the same statistics for "xx"
    filler = Passage.make("cc", "zz zz")
    for passages in ([first, filler, second], [second, filler, first]):
        corpus = Corpus(passages)
        (ranking,) = BM25Retriever(stopwords=None, stemmer=None).retrieve([question("xx")], None, corpus, top_k=3)
        assert ranking.passage_scores[0] == ranking.passage_scores[1] > 0 == ranking.passage_scores[2]
        assert ranking.passage_ids == [passages[0].id, passages[2].id, filler.id]


def test_batches_give_the_same_rankings(monkeypatch):
    questions = QUESTIONS + [question("the of", "stop")]
    whole = BM25Retriever(batch_size=1024)
    calls = []
    single = BM25Retriever(batch_size=1)
    scores = single.scores
    monkeypatch.setattr(single, "scores", lambda qs, corpus: calls.append(len(qs)) or scores(qs, corpus))
    assert single.retrieve(questions, None, CORPUS, top_k=6) == whole.retrieve(questions, None, CORPUS, top_k=6)
    assert calls == [1, 1, 1, 1] and single.fallbacks == whole.fallbacks == 1


def test_the_index_is_built_once_per_corpus(monkeypatch):
    built = []
    index = bm25s.BM25.index

    def counted(self, *args, **kwargs):
        built.append(self)
        return index(self, *args, **kwargs)

    monkeypatch.setattr(bm25s.BM25, "index", counted)
    bm25 = BM25Retriever()
    first = bm25.retrieve(QUESTIONS, None, CORPUS)
    assert bm25.retrieve(QUESTIONS, None, Corpus(list(CORPUS))) == first  # an equal corpus: the same key
    assert len(built) == 1 and bm25.bm25_index(CORPUS) is bm25.bm25_index(Corpus(list(CORPUS)))
    bm25.retrieve(QUESTIONS, None, Corpus(list(CORPUS)[:4]))
    assert len(built) == 2


def test_the_config_builds_the_documented_retriever(tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)

    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=["retriever=[bm25]", "output_dir=unused"])
    assert list(cfg.retriever) == ["bm25"]
    bm25 = instantiate(cfg.retriever.bm25)
    assert isinstance(bm25, BM25Retriever)
    settings = (bm25.k1, bm25.b, bm25.method, bm25.stopwords, bm25.stemmer, bm25.batch_size)
    assert settings == (1.5, 0.75, "lucene", "en", "english", 1024)
    assert set(cfg.retriever.bm25) - {"_target_"} == {"k1", "b", "method", "stopwords", "stemmer", "batch_size"}
