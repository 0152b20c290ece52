"""The Levi-graph encoding of a subgraph for the Graph Language Model (GLM; Plenz & Frank 2024).

GLM-RAG §3 reads a subgraph as text: every label is tokenised on its own, and the tokens are joined by
the graph's structure. The Levi graph has an **entity node** per distinct entity, whose tokens every
triple using it shares, and a **relation node** per triple. :class:`LeviLayout` holds tokens and
structure in ``O(L + S)`` numbers; :func:`graph_positions` (:mod:`glmrag.graph.positions`) expands it per
batch into the ``(L, L)`` positions and pair kinds of :class:`LeviGraph` (a 600-triplet subgraph has
about 3,300 tokens, whose int32 positions would take 44 MB stored). :func:`linearise_subgraph` writes the
triples as plain text instead (GLM-RAG Table 15, "without graph-aware attention").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.graph.label_tokens import LabelTokens, label_tokens
from glmrag.graph.positions import (  # noqa: F401 (the kinds and rules are read from here too)
    GRAPH_GLOBAL,
    GRAPH_TO_TEXT,
    POSITION_CONFLICTS,
    POSITION_MODES,
    SAME_TRIPLE,
    TEXT_TO_GRAPH,
    TEXT_TO_TEXT,
    graph_positions,
)
from glmrag.graph.subgraph import Subgraph
from glmrag.index.kg import KGIndex


@dataclass(frozen=True)
class LeviLayout:
    """The tokens of a Levi graph (or of its linearised text) and its structure, without positions.

    Every string (node or question) is tokenised on its own without special tokens (no BOS, EOS,
    ``[CLS]``/``[SEP]``); only the question may end with an end-of-sequence token
    (:func:`question_tokens_of`). In a linear layout each entity node owns every copy of its tokens.

    Shapes: ``L = L_g + L_q`` tokens, ``N`` nodes, ``S`` triples.
    """

    input_ids: np.ndarray
    """(L,) int64 token ids: all graph tokens, then the question tokens."""
    node_of_token: np.ndarray
    """(L,) int64 node of each token; -1 for question tokens (and relation tokens of a linear layout)."""
    entity_of_node: np.ndarray
    """(N,) int64 entity id of each entity node; -1 for relation nodes."""
    triple_nodes: np.ndarray
    """(S, 3) int64 head, relation and tail node of each triple (empty for a linear layout)."""
    num_question_tokens: int
    linear: bool = False
    """True: the graph part is plain text (:func:`linearise_subgraph`), read with ordinary positions."""

    def __post_init__(self) -> None:
        n_tok, n_node = len(self.input_ids), len(self.entity_of_node)
        if self.node_of_token.shape != (n_tok,) or self.triple_nodes.reshape(-1, 3).shape[1] != 3:
            raise ValueError(f"LeviLayout with {n_tok} tokens has node_of_token {self.node_of_token.shape}")
        if n_tok and self.node_of_token.max(initial=-1) >= n_node:
            raise ValueError(f"LeviLayout node_of_token refers past its {n_node} nodes")
        if not 0 <= self.num_question_tokens <= n_tok:
            raise ValueError(f"LeviLayout has {self.num_question_tokens} question tokens but {n_tok} tokens")

    @property
    def num_graph_tokens(self) -> int:
        """``L_g``: the question starts at this index."""
        return len(self.input_ids) - self.num_question_tokens

    @property
    def num_nodes(self) -> int:
        return len(self.entity_of_node)


@dataclass(frozen=True)
class LeviGraph(LeviLayout):
    """A :class:`LeviLayout` with its pairwise relative positions and pair kinds.

    Positions are those of a triple written as the sentence ``head relation tail``: with ``l_h, l_r`` the
    token lengths of head and relation, head token ``i``, relation token ``j`` and tail token ``k`` lie at
    ``i``, ``l_h + j`` and ``l_h + l_r + k``, and a pair's position is ``position(key) - position(query)``:
    head -> relation ``(l_h - i) + j``, head -> tail ``(l_h - i) + l_r + k``, relation -> tail
    ``(l_r - j) + k``, the reverse directions negative, and ``j - i`` within one node. Pairs that several
    triples position are settled by a rule of :data:`POSITION_CONFLICTS`.

    Kinds are the buckets of the global GLM (GLM-RAG App. B, three extra buckets):

    ====  =============================================================  ============================
    kind  pair (query token -> key token)                                ``relative_position``
    ====  =============================================================  ============================
    0     same node, or the two graph tokens share a triple              as above
    1     graph -> graph, no shared triple and not one node ("global")   0
    2     question -> graph                                              0
    3     graph -> question                                              0
    4     question -> question                                           ``j - i`` (ordinary T5)
    ====  =============================================================  ============================

    Position mode ``"path"`` (glmrag's extension, not a GLM-RAG setting) extends sentence positions along
    directed Levi-graph paths: token ``k`` of node ``v``, reached from node ``u`` by the shortest path
    ``u -> a -> ... -> v``, lies at ``(l_u - i) + l_a + ... + k`` from token ``i`` of ``u``; the smaller
    ``|.|`` of the two directions wins (ties forward for the query first in the layout), and only pairs no
    directed path joins take kind 1. A chain then reads exactly as its text, so a GLM in path mode
    reproduces T5 on the linearised chain (Plenz & Frank 2024). For pairs sharing a triple it agrees with
    ``"triple"`` unless a shorter path exists elsewhere.
    """

    relative_position: np.ndarray | None = None
    """(L, L) int32 position of key ``j`` minus position of query ``i``; 0 where ``kind`` is 1, 2 or 3."""
    kind: np.ndarray | None = None
    """(L, L) int8 pair category, one of :data:`SAME_TRIPLE` .. :data:`TEXT_TO_TEXT`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        n_tok = len(self.input_ids)
        for name in ("relative_position", "kind"):
            if getattr(self, name) is None or getattr(self, name).shape != (n_tok, n_tok):
                raise ValueError(f"LeviGraph with {n_tok} tokens needs {name} of shape ({n_tok}, {n_tok})")


def with_positions(layout: LeviLayout, mode: str = "triple", conflict: str = "last") -> LeviGraph:
    """``layout`` and its :func:`graph_positions`."""
    relative_position, kind = graph_positions(layout, mode, conflict)
    fields = {name: getattr(layout, name) for name in LeviLayout.__dataclass_fields__}
    return LeviGraph(**fields, relative_position=relative_position, kind=kind)


# -- layouts ---------------------------------------------------------------------------------------


def layout_subgraph(
    index: KGIndex, subgraph: Subgraph, tokenizer, question: str | None = None, question_eos: bool = False
) -> LeviLayout:
    """Lay out ``subgraph`` of ``index`` (its triples in selection order) and ``question``.

    ``question_eos`` ends the question with the tokenizer's end-of-sequence token (:func:`question_tokens_of`).

    ``entity_of_node`` holds ids of ``index.entities``. Entities of ``subgraph.entities`` that no
    selected triple touches (an isolated seed) become entity nodes after the others, so every entity
    the retriever may score has tokens.
    """
    rows = index.triples[subgraph.triples] + np.array([0, index.num_entities, 0])  # (S, 3) label ids
    extra = np.asarray(subgraph.entities, dtype=np.int64)
    question_tokens = question_tokens_of(question, tokenizer, question_eos)
    return _layout(rows, extra, label_tokens(index, tokenizer), question_tokens)


def layout_triples(
    triples: Sequence[tuple[str, str, str]], tokenizer, question: str | None = None, question_eos: bool = False
) -> LeviLayout:
    """Lay out phrase triples ``(head, relation, tail)`` and ``question`` (``question_eos``: see layout_subgraph).

    Entities are identified by their phrase: equal strings are one node. ``entity_of_node`` numbers the
    distinct entity phrases 0, 1, ... in order of first appearance (head before tail).
    """
    ids: dict[str, int] = {}
    for h, _, t in triples:
        ids.setdefault(h, len(ids))
        ids.setdefault(t, len(ids))
    relations = {r: len(ids) + i for i, r in enumerate(dict.fromkeys(r for _, r, _ in triples))}
    rows = np.asarray([(ids[h], relations[r], ids[t]) for h, r, t in triples], dtype=np.int64).reshape(-1, 3)
    store = LabelTokens([*ids, *relations], tokenizer)
    question_tokens = question_tokens_of(question, tokenizer, question_eos)
    return _layout(rows, np.zeros(0, dtype=np.int64), store, question_tokens)


def encode_triples(
    triples: Sequence[tuple[str, str, str]],
    tokenizer,
    question: str | None = None,
    mode: str = "triple",
    conflict: str = "last",
    question_eos: bool = False,
) -> LeviGraph:
    """:func:`layout_triples` with its positions."""
    return with_positions(layout_triples(triples, tokenizer, question, question_eos), mode, conflict)


def linearise_subgraph(
    index: KGIndex, subgraph: Subgraph, tokenizer, question: str | None = None, question_eos: bool = False
) -> LeviLayout:
    """The linear layout of ``subgraph``: every triple written ``head relation tail``, then the question.

    Entity nodes are those of :func:`layout_subgraph` (same ``entity_of_node`` order, relation nodes
    left out); every copy of an entity's tokens belongs to its node, relation tokens to none (-1).
    Isolated entities of ``subgraph.entities`` are written once after the triples.
    """
    rows = index.triples[subgraph.triples]  # (S, 3)
    order = list(dict.fromkeys([int(e) for h, _, t in rows for e in (h, t)] + [int(e) for e in subgraph.entities]))
    node = {e: n for n, e in enumerate(order)}
    pieces: list[tuple[str, int]] = []
    for h, r, t in rows:
        pieces += [(index.entities[int(h)], node[int(h)]), (index.relations[int(r)], -1)]
        pieces.append((index.entities[int(t)], node[int(t)]))
    touched = {int(e) for e in rows[:, [0, 2]].ravel()}
    pieces += [(index.entities[e], node[e]) for e in order if e not in touched]
    tokens = _tokenise([text for text, _ in pieces], tokenizer)
    _check_nonempty([text for text, _ in pieces], tokens)
    question_tokens = question_tokens_of(question, tokenizer, question_eos)
    ids = [tok for toks in tokens for tok in toks] + question_tokens
    node_of_token = [n for (_, n), toks in zip(pieces, tokens, strict=True) for _ in toks]
    node_of_token += [-1] * len(question_tokens)
    return LeviLayout(
        input_ids=np.asarray(ids, dtype=np.int64),
        node_of_token=np.asarray(node_of_token, dtype=np.int64),
        entity_of_node=np.asarray(order, dtype=np.int64),
        triple_nodes=np.zeros((0, 3), dtype=np.int64),
        num_question_tokens=len(question_tokens),
        linear=True,
    )


def linearise(triples: Sequence[tuple[str, str, str]], tokenizer, question: str | None = None) -> np.ndarray:
    """(L,) int64 token ids of a path of triples written as text, then the question.

    Each triple is written ``head relation tail`` with the same per-phrase tokenisation as
    :func:`layout_triples`, except that a head equal to the previous triple's tail is not repeated, so a
    path ``e1 -r1-> e2 -r2-> e3`` reads ``e1 r1 e2 r2 e3``. For such a chain the result equals
    ``layout_triples(...).input_ids``.
    """
    texts: list[str] = []
    previous_tail: str | None = None
    for h, r, t in triples:
        texts.extend([r, t] if h == previous_tail else [h, r, t])
        previous_tail = t
    if question:
        texts.append(question)
    pieces = _tokenise(texts, tokenizer)
    return np.asarray([tok for piece in pieces for tok in piece], dtype=np.int64)


def _tokenise(texts: list[str], tokenizer) -> list[list[int]]:
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def question_tokens_of(question: str | None, tokenizer, eos: bool) -> list[int]:
    """The question's token ids (none without a question), ended by an end-of-sequence token when ``eos``.

    The GLM reference code (Plenz & Frank 2024, ``add_text_to_graph_data``) tokenises the appended text
    with the tokenizer's special tokens, which for T5 appends ``</s>``; GLM-RAG does not say. A tokenizer
    without ``eos_token`` (the BERT-style MiniLM tokenizer of the offline demo) ends it with its
    ``sep_token``, its own end-of-sequence marker.
    """
    if not question:
        return []
    tokens = _tokenise([question], tokenizer)[0]
    if not eos:
        return tokens
    end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if end is None:
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has neither an eos nor a sep token to end "
            "the question with; set model.subgraph.question_eos=false"
        )
    return [*tokens, int(end)]


def _check_nonempty(texts: Sequence[str], tokens: Sequence[list[int]]) -> None:
    for text, toks in zip(texts, tokens, strict=True):
        if not toks:
            raise ValueError(f"node {text!r} tokenises to no tokens; every node needs one")


def _layout(rows: np.ndarray, extra: np.ndarray, store: LabelTokens, question_tokens: list[int]) -> LeviLayout:
    """The Levi layout of triples ``rows`` (``(S, 3)`` label ids of ``store``: head, relation, tail) and the
    entity labels ``extra``: nodes in order of first use, an entity node per distinct entity label, a relation
    node per triple, then the ``extra`` entities no triple touches. Entity label ids are the entity ids.
    """
    n_slot = rows.size  # 3S: head, relation, tail, head, ...
    labels = np.concatenate([rows.reshape(-1), extra])  # (3S + X,) in order of use
    entity_at = np.concatenate([np.flatnonzero(np.arange(n_slot) % 3 != 1), n_slot + np.arange(len(extra))])
    _, first, inverse = np.unique(labels[entity_at], return_index=True, return_inverse=True)
    new = np.ones(len(labels), dtype=bool)  # a relation slot always makes a node, an entity slot the first time
    new[entity_at] = False
    new[entity_at[first]] = True
    node_at = np.cumsum(new) - 1  # (3S + X,) node of each slot, right where it is made ...
    node_at[entity_at] = node_at[entity_at[first]][inverse]  # ... and an entity's first node where it recurs
    node_label = labels[new]  # (N,)
    is_entity = np.zeros(len(labels), dtype=bool)
    is_entity[entity_at] = True
    lengths = store.lengths(node_label)  # (N,)
    if not lengths.all():
        text = store.labels[int(node_label[np.argmin(lengths)])]
        raise ValueError(f"node {text!r} tokenises to no tokens; every node needs one")
    graph_tokens = store.gather(node_label, lengths)  # (L_g,)
    node_of_token = np.repeat(np.arange(len(node_label)), lengths)
    return LeviLayout(
        input_ids=np.concatenate([graph_tokens, np.asarray(question_tokens, dtype=np.int64)]),
        node_of_token=np.concatenate([node_of_token, np.full(len(question_tokens), -1)]).astype(np.int64),
        entity_of_node=np.where(is_entity[new], node_label, -1),
        triple_nodes=node_at[:n_slot].reshape(-1, 3),
        num_question_tokens=len(question_tokens),
    )
