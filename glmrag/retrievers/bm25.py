"""Sparse lexical retrieval: Okapi BM25 over the passages' words, scored with the ``bm25s`` library.

Each passage is indexed as the text dense retrieval embeds, ``"title\\ntext"``
(:func:`~glmrag.index.embed.passage_text`). Passages and questions are tokenised
alike by ``bm25s.tokenization.Tokenizer``:

1. lower-cased (``str.lower``);
2. split into the matches of bm25s's token regex ``(?u)\\b\\w\\w+\\b`` (runs of two or
   more Unicode word characters; one-character words and punctuation are dropped,
   an apostrophe splits ``Earth's`` into ``earth``);
3. stop-words removed (``stopwords="en"``: bm25s's ``STOPWORDS_EN``, the 33 words of
   Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``; None keeps every word);
4. stemmed with the Snowball English ("Porter2") stemmer of PyStemmer
   (``stemmer="english"``, any ``Stemmer.algorithms()`` name; None: no stemming).

A question word whose stem is not in the corpus vocabulary scores nothing, as in
bm25s's own ``retrieve``; a repeated question word counts once per occurrence.

The score of passage ``d`` for question ``q`` (``method="lucene"``, bm25s's default
and Lucene's ``BM25Similarity`` since Lucene 8, exact document lengths) is::

    sum over words t of q:  ln(1 + (N - df_t + 0.5) / (df_t + 0.5))
                            * tf_td / (tf_td + k1 * (1 - b + b * |d| / avgdl))

with ``N`` passages, ``df_t`` of them containing ``t``, ``tf_td`` occurrences of ``t``
in ``d``, ``|d|`` the passage's token count after steps 1-4 and ``avgdl`` its mean.
Lucene dropped the constant ``(k1 + 1)`` numerator of Robertson's form (LUCENE-8563),
which does not change a ranking. ``method="robertson"`` and ``"atire"`` are the other
variants of Kamphuis et al. (ECIR 2020) that bm25s computes without a document-length
free term. The defaults ``k1=1.5, b=0.75`` are bm25s's (``bm25s.BM25``); Lucene's are
``k1=1.2, b=0.75``; Robertson & Zaragoza (2009) give ``k1`` in [1.2, 2.0], ``b=0.75``.

The index (bm25s's precomputed per-(word, passage) scores) is built once per corpus,
keyed by :meth:`Corpus.content_hash`, and kept in memory. Questions are scored
``batch_size`` at a time as one sparse product over the whole corpus, so every
passage has a score and ties go to corpus order (:func:`~glmrag.index.ranking.top_k_stable`),
unlike bm25s's own top-k. A question with no indexed word (only stop-words or unseen
words) scores 0 everywhere and so ranks the corpus in order; such questions are
counted in :attr:`BM25Retriever.fallbacks`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import bm25s
import numpy as np
import scipy.sparse as sp
import Stemmer

from glmrag.data.types import Corpus, Question
from glmrag.index.embed import passage_text
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, top_k_stable
from glmrag.retrievers.base import Ranking

log = logging.getLogger(__name__)

K1 = 1.5
"""bm25s's default term-frequency saturation (``bm25s.BM25(k1=1.5)``); Lucene's is 1.2."""
B = 0.75
"""bm25s's and Lucene's default document-length normalisation."""
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
"""bm25s's token regex (``bm25s.tokenize``'s ``token_pattern``), written out so a bm25s change cannot move it."""
METHODS = ("lucene", "robertson", "atire")
"""bm25s's scoring variants whose score is a sum over the question's words in the passage. BM25L and BM25+ add a
score for absent words (and a ``delta``); they are left out rather than half supported."""


@dataclass(frozen=True)
class BM25Index:
    """One corpus's BM25 index: the tokenizer that holds its vocabulary and every (word, passage) score."""

    tokenizer: bm25s.tokenization.Tokenizer
    """Fitted on the corpus; tokenises questions into the same word ids (unseen words dropped)."""
    scores: sp.csr_matrix
    """(V, P) float32: the BM25 score a single occurrence of word ``v`` in a question gives passage ``p``."""


class BM25Retriever:
    """Rank passages by Okapi BM25 between the question's and the passage's words (see the module docstring)."""

    name = "bm25"

    def __init__(
        self,
        k1: float = K1,
        b: float = B,
        method: str = "lucene",
        stopwords: str | None = "en",
        stemmer: str | None = "english",
        batch_size: int = 1024,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"BM25Retriever: method={method!r}; choose one of {METHODS}")
        if k1 < 0 or not 0.0 <= b <= 1.0:
            raise ValueError(f"BM25Retriever: k1={k1}, b={b}; need k1 >= 0 and 0 <= b <= 1")
        if stemmer is not None and stemmer not in Stemmer.algorithms():
            raise ValueError(f"BM25Retriever: stemmer={stemmer!r}; choose null or one of {Stemmer.algorithms()}")
        if batch_size < 1:
            raise ValueError(f"BM25Retriever: batch_size={batch_size} must be at least 1")
        self.k1, self.b, self.method = k1, b, method
        self.stopwords, self.stemmer, self.batch_size = stopwords, stemmer, batch_size
        self._indexes: dict[str, BM25Index] = {}
        self.fallbacks = 0
        """Questions of the last :meth:`retrieve` call with no indexed word (all scores 0: corpus order)."""

    def _tokenizer(self) -> bm25s.tokenization.Tokenizer:
        stemmer = Stemmer.Stemmer(self.stemmer) if self.stemmer is not None else None
        return bm25s.tokenization.Tokenizer(
            lower=True, splitter=TOKEN_PATTERN, stopwords=self.stopwords, stemmer=stemmer
        )

    def bm25_index(self, corpus: Corpus) -> BM25Index:
        """The BM25 index of ``corpus`` (passages as ``"title\\ntext"``), built on first use and kept per corpus."""
        key = corpus.content_hash()
        if key not in self._indexes:
            tokenizer = self._tokenizer()
            # allow_empty=False: a passage without a word gets no tokens (length 0), as with bm25s.tokenize,
            # rather than the tokenizer's "" placeholder word, which a word-less question would then match
            ids = tokenizer.tokenize(
                [passage_text(p) for p in corpus], update_vocab=True, show_progress=False, allow_empty=False
            )
            model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
            model.index((ids, tokenizer.get_vocab_dict()), show_progress=False)
            s = model.scores
            vocab = len(s["indptr"]) - 1
            scores = sp.csr_matrix((s["data"], s["indices"], s["indptr"]), shape=(vocab, s["num_docs"]))
            self._indexes[key] = BM25Index(tokenizer, scores)
        return self._indexes[key]

    def scores(self, questions: Sequence[Question], corpus: Corpus) -> tuple[np.ndarray, np.ndarray]:
        """BM25 score of every passage for each question, and which questions have no indexed word.

        Shapes: -> (B, P) float32 in corpus order, (B,) bool.
        """
        bm25 = self.bm25_index(corpus)
        # update_vocab=False: a question never grows the vocabulary; its unseen words are dropped
        ids = bm25.tokenizer.tokenize(
            [q.question for q in questions], update_vocab=False, show_progress=False, allow_empty=False
        )
        vocab = bm25.scores.shape[0]
        rows = np.repeat(np.arange(len(ids)), [len(t) for t in ids])
        cols = np.fromiter((t for tokens in ids for t in tokens), dtype=np.int64, count=rows.size)
        # duplicate (question, word) entries are summed: a repeated word counts per occurrence, as in bm25s
        counts = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(len(ids), vocab))  # (B, V)
        scores = (counts @ bm25.scores).toarray()  # (B, V) @ (V, P) -> (B, P)
        return scores, np.array([len(t) == 0 for t in ids], dtype=bool)

    def retrieve(
        self, questions: Sequence[Question], index: KGIndex | None, corpus: Corpus, top_k: int = 10
    ) -> list[Ranking]:
        """The ``top_k`` passages of ``corpus`` by BM25 score, best first; ties in corpus order.

        ``index`` is not used (BM25 needs no graph).
        """
        self.fallbacks = 0
        rankings: list[Ranking] = []
        for start in range(0, len(questions), self.batch_size):
            batch = questions[start : start + self.batch_size]
            scores, empty = self.scores(batch, corpus)  # (B, P), (B,)
            self.fallbacks += int(empty.sum())
            positions, values = top_k_stable(scores, top_k)  # (B, k)
            rankings += make_rankings([q.id for q in batch], corpus.ids, positions, values)
        if self.fallbacks:
            log.warning(
                "BM25: %d of %d questions have no indexed word (only stop-words or words absent from the corpus); "
                "they rank the corpus in order",
                self.fallbacks,
                len(questions),
            )
        return rankings
