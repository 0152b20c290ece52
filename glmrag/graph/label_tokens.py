"""Token ids of KG labels by id, each label tokenised once per index and tokenizer (not once per question).

GLM-RAG (Sec. 3, "GLM retriever") tokenises "edge and node labels ... individually". A question's
600-triplet subgraph reuses labels that other questions' subgraphs hold too, so :class:`LabelTokens`
keeps every label's token ids in one flat array with a start and a length per label id, filled on first
use, and hands out the ids of many labels at once as array operations (no Python object per token).
:func:`label_tokens` returns the store of an ``(index, tokenizer)`` pair, kept while both live.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np


class LabelTokens:
    """Token ids of ``labels[i]`` for label ids ``i``, tokenised (``add_special_tokens=False``) on first use."""

    def __init__(self, labels: Sequence[str], tokenizer) -> None:
        self.labels, self.tokenizer = labels, tokenizer
        self.start = np.full(len(labels), -1, dtype=np.int64)
        """(V,) where label ``i``'s ids begin in :attr:`tokens`; -1 until it is tokenised."""
        self.length = np.zeros(len(labels), dtype=np.int64)
        """(V,) how many ids label ``i`` has."""
        self.tokens = np.zeros(0, dtype=np.int64)
        """Every tokenised label's ids, back to back (grown by doubling)."""
        self.used = 0

    def lengths(self, ids: np.ndarray) -> np.ndarray:
        """(n,) token counts of labels ``ids``, tokenising those not seen yet."""
        self._tokenise(np.unique(ids[self.start[ids] < 0]))
        return self.length[ids]

    def gather(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The ids of labels ``ids`` (already :meth:`lengths`-ed), back to back: ``(sum(lengths),)`` int64."""
        ends = np.cumsum(lengths)  # (n,)
        # Token t of label n sits at start[ids[n]] + t; a ragged arange shifted per label.
        shift = np.repeat(self.start[ids] - (ends - lengths), lengths)  # (T,)
        return self.tokens[np.arange(int(ends[-1]) if len(ends) else 0) + shift]

    def _tokenise(self, new: np.ndarray) -> None:
        if not new.size:
            return
        pieces = self.tokenizer([self.labels[i] for i in new.tolist()], add_special_tokens=False)["input_ids"]
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        flat = np.fromiter((tok for p in pieces for tok in p), dtype=np.int64, count=int(lengths.sum()))
        if self.used + flat.size > self.tokens.size:
            grown = np.zeros(max(2 * self.tokens.size, self.used + flat.size, 1024), dtype=np.int64)
            grown[: self.used] = self.tokens[: self.used]
            self.tokens = grown
        self.tokens[self.used : self.used + flat.size] = flat
        self.start[new] = self.used + np.cumsum(lengths) - lengths
        self.length[new] = lengths
        self.used += flat.size


class _Labels(Sequence):
    """An index's entities then its relations as one label list: entity ``e`` is label ``e``, relation ``r``
    label ``len(entities) + r``."""

    def __init__(self, entities: Sequence[str], relations: Sequence[str]) -> None:
        self.entities, self.relations = entities, relations

    def __len__(self) -> int:
        return len(self.entities) + len(self.relations)

    def __getitem__(self, i):
        n = len(self.entities)
        return self.entities[i] if i < n else self.relations[i - n]


_STORES: dict[tuple[int, int], tuple[weakref.ref, weakref.ref, LabelTokens]] = {}
"""(id(index), id(tokenizer)) -> weak references to both and their store; an entry leaves when either dies."""


def label_tokens(index, tokenizer) -> LabelTokens:
    """The store of ``index``'s labels (entities, then relations; :class:`_Labels`) under ``tokenizer``.

    One per live ``(index, tokenizer)`` pair in this process; a tokenizer that cannot be weakly referenced
    gets a fresh store each call (correct, only slower).
    """
    key = (id(index), id(tokenizer))
    held = _STORES.get(key)
    if held is not None and held[0]() is index and held[1]() is tokenizer:
        return held[2]
    store = LabelTokens(_Labels(index.entities, index.relations), tokenizer)
    try:
        drop = lambda _, key=key: _STORES.pop(key, None)  # noqa: E731
        _STORES[key] = (weakref.ref(index, drop), weakref.ref(tokenizer, drop), store)
    except TypeError:  # not weakly referenceable: no cache
        pass
    return store
