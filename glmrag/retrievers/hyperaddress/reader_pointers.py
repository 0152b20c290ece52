"""Pointer scores of a reader's addressing heads (Read the Route §3, §4.2).

The reader reads the top-ranked passages, then the question, in one forward pass without generating (§3).
A head's pointer score of an entity is the attention from the question tokens to the entity's mention
tokens (this project's reading of §3; the value-vector norm is left out). Scores are read at every question
token (§3 Obs. 2, "word-level addressing"); an entity scores the mean over heads of its best question token.
Only the question rows of the chosen heads are materialised (:mod:`glmrag.nn.attention_rows`). The prompt is
``Wikipedia Title: {title}\n{text}`` per passage (GLM-RAG Fig. 20's layout), blank lines between passages,
then ``\n\nQuestion: {question}``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from glmrag.data.types import Passage
from glmrag.graph.hypergraph import mention_spans
from glmrag.llm.base import LLM, Generation
from glmrag.nn.attention_rows import capture_attention_rows
from glmrag.retrievers.hyperaddress.settings import POINTERS

QUESTION_PREFIX = "\n\nQuestion: "


class Reader:
    """A causal LM and its (fast) tokenizer, read for attention only.

    ``name`` identifies the model in the addressing-head cache; ``max_tokens``
    bounds the prompt (trailing passages are dropped to fit). ``llm``, the
    backend the model came from (set by :meth:`from_llm`), receives the cost of
    every forward pass (:func:`pointer_scores`) in its usage counter; a reader
    of a bare model (``llm`` None) counts nothing.
    """

    def __init__(self, model, tokenizer, name: str, max_tokens: int = 2048, llm: LLM | None = None) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(f"reader {name}: a fast tokenizer is needed (character offsets of tokens)")
        self.model, self.tokenizer, self.name, self.max_tokens = model.eval(), tokenizer, name, max_tokens
        self.llm = llm

    @classmethod
    def from_llm(cls, llm, max_tokens: int = 2048) -> Reader:
        """The model and tokenizer of a local LLM backend (:class:`glmrag.llm.local.LocalLLM`), passed in.

        The reader keeps ``llm``, so its forward passes are counted in ``llm.usage``.
        """
        return cls(llm.model, llm.tokenizer, llm.name, max_tokens, llm=llm)

    def track(self, method: str | None = None, question_id: str | None = None) -> AbstractContextManager:
        """``llm.track(method, question_id)`` of the reader's LLM; a no-op for a reader without one."""
        return self.llm.track(method, question_id) if self.llm is not None else nullcontext()

    def record(self, tokens: int, seconds: float) -> None:
        """Count one forward pass over ``tokens`` tokens: a call that reads them and generates nothing."""
        if self.llm is not None:
            self.llm.usage.record(Generation("", prompt_tokens=tokens, generated_tokens=0, seconds=seconds))

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.model.config.num_attention_heads)

    def all_heads(self) -> list[tuple[int, int]]:
        return [(layer, head) for layer in range(self.num_layers) for head in range(self.num_heads)]


@dataclass
class ReadContext:
    """One reader input: the tokens, the question rows and which tokens mention which candidate entity."""

    input_ids: torch.Tensor
    """(1, S) token ids."""
    question_rows: torch.Tensor
    """(R,) positions of the question's tokens."""
    candidates: list[int]
    """Entity ids with at least one mention token, in first-mention order."""
    mentions: torch.Tensor
    """(S, C) float32, 1 where token ``s`` is part of a mention of candidate ``c``."""
    passages: list[int]
    """Positions (in the hypergraph) of the passages that fit in the prompt."""
    surface: dict[int, str]
    """Candidate entity -> its first mention's text as written (for rewriting)."""


def _tokens_in(offsets: np.ndarray, start: int, end: int) -> np.ndarray:
    """Tokens whose characters overlap ``[start, end)`` (special tokens have empty offsets and never do)."""
    return np.flatnonzero((offsets[:, 0] < end) & (offsets[:, 1] > start) & (offsets[:, 1] > offsets[:, 0]))


def build_context(
    reader: Reader,
    passages: Sequence[tuple[int, Passage, Sequence[tuple[int, str]]]],
    question: str,
) -> ReadContext:
    """Lay out ``passages`` (position, passage, its (entity id, name) pairs) and ``question`` for one forward.

    Passages that would push the prompt past ``reader.max_tokens`` are dropped from the end.
    """
    kept = list(passages)
    while True:
        blocks = [f"Wikipedia Title: {p.title}\n{p.text}" for _, p, _ in kept]
        prefix = "\n\n".join(blocks)
        text = prefix + QUESTION_PREFIX + question
        encoded = reader.tokenizer(text, return_offsets_mapping=True)
        if len(encoded["input_ids"]) <= reader.max_tokens or not kept:
            break
        kept = kept[:-1]
    offsets = np.asarray(encoded["offset_mapping"], dtype=np.int64).reshape(-1, 2)  # (S, 2)
    question_start = len(prefix) + len(QUESTION_PREFIX)
    rows = _tokens_in(offsets, question_start, len(text))
    if rows.size == 0:
        raise ValueError(f"question {question!r} tokenised to nothing; give it some text")
    spans: dict[int, list[int]] = {}
    surface: dict[int, str] = {}
    start = 0
    for (_, _, entities), block in zip(kept, blocks, strict=True):
        for entity, name in entities:
            for a, b in mention_spans(block, name):
                spans.setdefault(entity, []).extend(_tokens_in(offsets, start + a, start + b).tolist())
                surface.setdefault(entity, block[a:b])
        start += len(block) + 2
    candidates = [e for e, toks in spans.items() if toks]
    mentions = torch.zeros(len(offsets), len(candidates))
    for c, entity in enumerate(candidates):
        mentions[spans[entity], c] = 1.0
    return ReadContext(
        torch.tensor([encoded["input_ids"]]),
        torch.as_tensor(rows),
        candidates,
        mentions,
        [pos for pos, _, _ in kept],
        {e: surface[e] for e in candidates},
    )


@torch.no_grad()
def pointer_scores(reader: Reader, context: ReadContext, heads: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Attention mass from each question token to each candidate's mentions, per head.

    The forward pass is counted as one call of ``S`` prompt tokens (:meth:`Reader.record`) under the
    current usage tag of the reader's LLM (HyperAddress Fig. 5 compares cost).

    Shapes: -> (len(heads), R, C) float32, in the sorted order of ``heads``.
    """
    device = next(reader.model.parameters()).device
    start = time.perf_counter()
    with capture_attention_rows(reader.model, heads, context.question_rows) as captured:
        # logits only for the last position: the reader is read, never decoded (the LM head over
        # every position would cost as much as the layers of a small model)
        reader.model(context.input_ids.to(device), logits_to_keep=1)
    reader.record(int(context.input_ids.shape[1]), time.perf_counter() - start)
    weights = captured.weights[0].cpu()  # (H, R, S)
    return weights @ context.mentions  # (H, R, C)


def entity_pointer(scores: torch.Tensor, pointer: str = "word") -> np.ndarray:
    """An entity's score averaged over heads: at its best question token (``word``) or at the last one
    (``last_token``, :data:`POINTERS`). Shapes: (H, R, C) -> (C,)."""
    if pointer not in POINTERS:
        raise ValueError(f"pointer={pointer!r} is unknown; expected one of {', '.join(POINTERS)}")
    per_head = scores.amax(dim=1) if pointer == "word" else scores[:, -1, :]  # (H, C)
    return per_head.mean(dim=0).numpy().astype(np.float64)
