"""Question answering over retrieved evidence: the layer between retrievers and the evaluator.

- :class:`QAReader` (``reader``): an LLM answers each question from its context with GLM-RAG's one-shot
  "Thought: ... Answer: ..." prompt (App. E, Fig. 20); :func:`parse_answer` reads the answer.
- ``context``: :class:`QAContext` builders: the top passages of a ranking, nothing (the no-context
  baseline) and the question's KG subgraph as triples (the subgraph baseline, GLM-RAG Table 8).
- ``prompts``: the per-dataset one-shot prompts.
"""

from glmrag.qa.context import (
    BASELINES,
    PASSAGES,
    QAContext,
    baseline_contexts,
    no_context,
    passage_context,
    subgraph_context,
    subgraph_triples,
)
from glmrag.qa.reader import ANSWER_FALLBACK, QAReader, parse_answer

__all__ = [
    "ANSWER_FALLBACK",
    "BASELINES",
    "PASSAGES",
    "QAContext",
    "QAReader",
    "baseline_contexts",
    "no_context",
    "parse_answer",
    "passage_context",
    "subgraph_context",
    "subgraph_triples",
]
