"""What the QA reader reads besides the question: retrieved passages, a KG subgraph, or nothing.

GLM-RAG measures QA on the top-k documents of each retriever (§4.3, App. E) and adds two baselines
that need no ranking: the no-context baseline (§5.1 e, "evaluates the LM's capability to answer
questions without any retrieved context") and the subgraph baseline (App. E, Table 8: "the subgraph
selection is done via the same method in GLM-RAG, starting from the question entities and selecting
600 triplets in a 2-hop neighborhood"). Each builder here returns a :class:`QAContext`;
:class:`glmrag.qa.reader.QAReader` turns it into a prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from glmrag.data.types import Corpus, Passage, Question
from glmrag.graph.subgraph import MAX_HOPS, MAX_TRIPLETS, Subgraph, select_subgraph
from glmrag.index.kg import KGIndex
from glmrag.retrievers.base import Ranking

PASSAGES = 5
"""Documents the reader reads: GLM-RAG §4.3 says "the top-k documents" without k; its Fig. 20 one-shot
example shows five documents, so five."""
BASELINES = ("no_context", "subgraph")
"""The QA baselines without a ranking (GLM-RAG §5.1 e and App. E, Table 8)."""


@dataclass(frozen=True)
class QAContext:
    """The evidence of one question: passages (rank order) or triples (selection order), or neither."""

    passages: tuple[Passage, ...] = ()
    triples: tuple[tuple[str, str, str], ...] = ()
    """(head, relation, tail) as text."""

    def __post_init__(self) -> None:
        if self.passages and self.triples:
            raise ValueError("a QAContext holds passages or triples, not both; build one context per kind")
        for t in self.triples:
            if len(t) != 3 or not all(isinstance(x, str) for x in t):
                raise ValueError(f"triple {t!r} of a QAContext is not (head, relation, tail) text")

    @property
    def kind(self) -> str:
        """``passages``, ``triples`` or ``none``."""
        return "passages" if self.passages else "triples" if self.triples else "none"


def passage_context(ranking: Ranking, corpus: Corpus, passages: int = PASSAGES) -> QAContext:
    """The top ``passages`` passages of ``ranking``, best first, with their titles and texts from ``corpus``."""
    if passages < 1:
        raise ValueError(f"passages is {passages}; the reader needs at least one passage")
    top = ranking.passage_ids[:passages]
    missing = [pid for pid in top if pid not in corpus]
    if missing:
        raise ValueError(
            f"question {ranking.question_id}: ranked passages {missing[:3]} are not in the corpus; rank the "
            "corpus the reader is given (the dataset's corpus the index was built from)"
        )
    return QAContext(passages=tuple(corpus[corpus.position(pid)] for pid in top))


def no_context() -> QAContext:
    """The no-context baseline's context: nothing (GLM-RAG §5.1 e)."""
    return QAContext()


def subgraph_triples(index: KGIndex, subgraph: Subgraph) -> list[tuple[str, str, str]]:
    """The subgraph's triples as (head, relation, tail) text, in selection order: the phrases
    :func:`glmrag.graph.levi.linearise_subgraph` writes as ``head relation tail``."""
    rows = index.triples[subgraph.triples]  # (S, 3)
    return [(index.entities[int(h)], index.relations[int(r)], index.entities[int(t)]) for h, r, t in rows]


def subgraph_context(
    index: KGIndex, question_id: str, max_triplets: int = MAX_TRIPLETS, max_hops: int = MAX_HOPS, seed: int = 0
) -> QAContext:
    """The subgraph baseline's context: :func:`~glmrag.graph.subgraph.select_subgraph` around the question's
    seed entities (GLM-RAG App. E, Table 8: 600 triplets in a 2-hop neighbourhood, the defaults), as triples.

    A question without linked entities gets no triples, so it is read like the no-context baseline.
    """
    subgraph = select_subgraph(index, index.seeds(question_id), max_hops=max_hops, max_triplets=max_triplets, seed=seed)
    return QAContext(triples=tuple(subgraph_triples(index, subgraph)))


def baseline_contexts(
    name: str,
    questions: Sequence[Question],
    index: KGIndex,
    max_triplets: int = MAX_TRIPLETS,
    max_hops: int = MAX_HOPS,
    seed: int = 0,
) -> list[QAContext]:
    """One context per question for the baseline ``name`` (one of :data:`BASELINES`)."""
    if name == "no_context":
        return [no_context() for _ in questions]
    if name == "subgraph":
        return [subgraph_context(index, q.id, max_triplets, max_hops, seed) for q in questions]
    raise ValueError(f"QA baseline {name!r} is unknown; qa_baselines takes a list of {list(BASELINES)}")
