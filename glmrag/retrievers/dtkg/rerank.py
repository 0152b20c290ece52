"""Stage II of DTKG's two-stage scoring (§3.3.1): rerankers that score candidate triples against a query.

:class:`LLMReranker` is the paper's listwise reranker (DTKG App. A.4): one prompt numbers the candidates,
the LLM lists the relevant ones best first, and the candidate at rank ``i`` of ``m`` listed scores
``1 - i / m`` (unlisted 0). A reply without a valid number scores every candidate 0.5 (Eq. 7 then orders
by cosine) and counts ``rerank_fallback``. :class:`CrossEncoderReranker` is the pointwise alternative
(e.g. ``BAAI/bge-reranker-base``), scores ``sigmoid(logit)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from glmrag.llm.base import LLM
from glmrag.llm.parse import parse_json
from glmrag.retrievers.dtkg import prompts
from glmrag.retrievers.dtkg.settings import RERANK_LISTED

FALLBACK_SCORE = 0.5
"""Every candidate's score when the LLM's list cannot be read (neutral: Eq. 7 then follows the cosine)."""


@runtime_checkable
class Reranker(Protocol):
    def score(self, query: str, candidates: list[str]) -> np.ndarray:
        """Shapes: ``candidates`` (C,) -> (C,) float64 in [0, 1], higher is more relevant."""
        ...


def rank_scores(order: Sequence[int], n: int) -> np.ndarray:
    """Scores of ``n`` candidates from a best-first list of 0-based positions: ``1 - i / m``, unlisted 0."""
    scores = np.zeros(n, dtype=np.float64)
    for i, p in enumerate(order):
        scores[p] = 1.0 - i / len(order)
    return scores


def read_order(value, n: int) -> list[int]:
    """The valid, distinct 0-based positions of a parsed list of 1-based numbers (ints or digit strings)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    order: list[int] = []
    for item in items:
        try:
            k = int(str(item).strip().rstrip("."))
        except ValueError:
            continue
        if 1 <= k <= n and k - 1 not in order:
            order.append(k - 1)
    return order


class LLMReranker:
    """Listwise reranking by a chat LLM (DTKG App. A.4); see the module docstring for the scores."""

    def __init__(self, llm: LLM, listed: int = RERANK_LISTED) -> None:
        if listed < 1:
            raise ValueError(f"LLMReranker listed={listed} must be >= 1")
        self.llm, self.listed = llm, listed

    def score(self, query: str, candidates: list[str]) -> np.ndarray:
        return self.score_many([query], [candidates])[0]

    def score_many(self, queries: Sequence[str], candidates: Sequence[list[str]]) -> list[np.ndarray]:
        """One generate call for every (query, candidates) pair that has candidates."""
        todo = [i for i, c in enumerate(candidates) if c]
        out = [np.zeros(len(c), dtype=np.float64) for c in candidates]
        gens = self.llm.generate(
            [prompts.rerank(queries[i], candidates[i], self.listed) for i in todo],
            max_new_tokens=4 * self.listed + 4,
            stop=["]", "\n\n"],
        )
        for i, g in zip(todo, gens, strict=True):
            n = len(candidates[i])
            text = g.text if "[" not in g.text or "]" in g.text else g.text + "]"  # the stop string cut the bracket
            order = read_order(parse_json(text, [], counter=self.llm.usage, expect=(list, tuple, int)), n)
            if order:
                out[i] = rank_scores(order[: self.listed], n)
            else:
                self.llm.usage.count("rerank_fallback")
                out[i] = np.full(n, FALLBACK_SCORE)
        return out


class CrossEncoderReranker:
    """Pointwise reranking by a cross-encoder loaded by name or path; scores are ``sigmoid(logit)``."""

    def __init__(self, model: str, device: str | None = None, batch_size: int = 32, max_length: int = 256) -> None:
        import torch
        from sentence_transformers import CrossEncoder

        self.model_name = model
        self.batch_size = batch_size
        # Identity: the raw logit comes back and the sigmoid below is the one mapping, whatever the model's config says
        self.model = CrossEncoder(model, device=device, max_length=max_length, activation_fn=torch.nn.Identity())

    def score(self, query: str, candidates: list[str]) -> np.ndarray:
        if not candidates:
            return np.zeros(0, dtype=np.float64)
        logits = self.model.predict(
            [(query, c) for c in candidates], batch_size=self.batch_size, show_progress_bar=False
        )
        logits = np.asarray(logits, dtype=np.float64).reshape(len(candidates), -1)[:, 0]  # (C,)
        return 1.0 / (1.0 + np.exp(-logits))

    def score_many(self, queries: Sequence[str], candidates: Sequence[list[str]]) -> list[np.ndarray]:
        return [self.score(q, c) for q, c in zip(queries, candidates, strict=True)]


def score_many(reranker: Reranker, queries: Sequence[str], candidates: Sequence[list[str]]) -> list[np.ndarray]:
    """Batched scoring when the reranker offers it (one LLM call for all facts), else one query at a time."""
    if hasattr(reranker, "score_many"):
        return reranker.score_many(queries, candidates)
    return [reranker.score(q, c) for q, c in zip(queries, candidates, strict=True)]


def make_reranker(spec: str | Reranker, llm: LLM) -> Reranker:
    """``"llm"``: :class:`LLMReranker` over the retriever's own LLM (so its calls are counted with the method's);
    any other string: a cross-encoder name or path; a :class:`Reranker` object is used as is."""
    if isinstance(spec, str):
        return LLMReranker(llm) if spec == "llm" else CrossEncoderReranker(spec)
    if not isinstance(spec, Reranker):
        raise TypeError(f"reranker is {type(spec).__name__}; expected 'llm', a cross-encoder name, or a Reranker")
    return spec
