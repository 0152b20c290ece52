"""The Levi-graph encoding of a subgraph for the Graph Language Model (GLM; Plenz & Frank 2024).

GLM-RAG (Sec. 3, "GLM retriever") reads a subgraph as text: "edge and node labels are tokenized
individually and connected according to the original graph structure. This transformation allows each
triplet to be represented as a token sequence resembling natural text, while still sharing node tokens
across multiple triplets". This module builds those tokens and the graph-aware relative positions that
the GLM's attention bias reads.

The Levi graph turns every relation occurrence into a node of its own:

- an **entity node** per distinct entity; its tokens appear once and are shared by every triple that
  uses the entity;
- a **relation node** per triple; a relation used by three triples appears three times.

Relative positions are those of the triple written as the sentence ``head relation tail``: with
``l_h, l_r`` the token lengths of head and relation, head token ``i``, relation token ``j`` and tail
token ``k`` (all 0-based) lie at sentence positions ``i``, ``l_h + j`` and ``l_h + l_r + k``, and the
position of a pair is ``position(key) - position(query)``:

- head -> relation ``(l_h - i) + j``; head -> tail ``(l_h - i) + l_r + k``; relation -> tail
  ``(l_r - j) + k``; the reverse directions are the negatives;
- within one node ``j - i``.

**Conflicts.** Two tokens can share several triples that imply different distances (two triples
between the same pair of entities whose relations differ in length; an entity that is head of one
triple and tail of another with the same partner). The rule: the distance of **smallest absolute
value** wins, ties go to the **earliest triple** in the given order. Both directions of a pair are
decided by the same triple, so ``relative_position`` stays antisymmetric. Within-node positions
override any triple (a self-loop ``e r e`` does not move ``e``'s tokens relative to each other).

Pairs are sorted into the buckets of the "global GLM" (GLM-RAG App., "The default setting is global
with FullyConnected enabled, resulting in three additional buckets"), stored in :attr:`LeviGraph.kind`:

====  =============================================================  ============================
kind  pair (query token -> key token)                                ``relative_position``
====  =============================================================  ============================
0     same node, or the two graph tokens share a triple              as above
1     graph -> graph, no shared triple and not one node ("global")   0
2     question -> graph                                              0
3     graph -> question                                              0
4     question -> question                                           ``j - i`` (ordinary T5)
====  =============================================================  ============================

Every string (node or question) is tokenised on its own with ``add_special_tokens=False``: no BOS,
EOS or ``[CLS]``/``[SEP]``; a model that wants an end-of-sequence token adds it itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.graph.subgraph import Subgraph
from glmrag.index.kg import KGIndex

SAME_TRIPLE = 0
"""Kind of a pair inside one node or one triple: read :attr:`LeviGraph.relative_position`."""
GRAPH_GLOBAL = 1
"""Kind of a graph pair sharing no triple (the global GLM's extra bucket)."""
TEXT_TO_GRAPH = 2
"""Kind of a question token attending to a graph token."""
GRAPH_TO_TEXT = 3
"""Kind of a graph token attending to a question token."""
TEXT_TO_TEXT = 4
"""Kind of a pair of question tokens: ordinary positions ``j - i``."""


@dataclass(frozen=True)
class LeviGraph:
    """Tokens and pairwise relative positions of one Levi graph, followed by the question.

    Shapes: ``L = L_g + L_q`` tokens (``L_g`` graph tokens, then ``L_q`` question tokens) in ``N``
    nodes. The graph tokens of one node are contiguous; nodes appear in order of first use when the
    triples are walked ``head, relation, tail``, so a chain graph reads exactly as its sentence.
    """

    input_ids: np.ndarray
    """(L,) int64 token ids: all graph tokens, then the question tokens."""
    node_of_token: np.ndarray
    """(L,) int64 Levi node of each token; -1 for question tokens."""
    entity_of_node: np.ndarray
    """(N,) int64 entity id of each entity node; -1 for relation nodes."""
    relative_position: np.ndarray
    """(L, L) int64 position of key ``j`` minus position of query ``i``; 0 where ``kind`` is 1, 2 or 3."""
    kind: np.ndarray
    """(L, L) int8 pair category, one of :data:`SAME_TRIPLE` .. :data:`TEXT_TO_TEXT`."""

    def __post_init__(self) -> None:
        n_tok, n_node = len(self.input_ids), len(self.entity_of_node)
        if self.node_of_token.shape != (n_tok,) or self.relative_position.shape != (n_tok, n_tok):
            raise ValueError(
                f"LeviGraph with {n_tok} tokens has node_of_token {self.node_of_token.shape} and "
                f"relative_position {self.relative_position.shape}; expected ({n_tok},) and ({n_tok}, {n_tok})"
            )
        if self.kind.shape != (n_tok, n_tok) or (n_tok and self.node_of_token.max(initial=-1) >= n_node):
            raise ValueError(f"LeviGraph kind {self.kind.shape} or node_of_token does not fit {n_node} nodes")

    @property
    def num_graph_tokens(self) -> int:
        """``L_g``: the question starts at this index."""
        return int((self.node_of_token >= 0).sum())

    @property
    def num_nodes(self) -> int:
        return len(self.entity_of_node)


def encode_subgraph(index: KGIndex, subgraph: Subgraph, tokenizer, question: str | None = None) -> LeviGraph:
    """Encode ``subgraph`` of ``index`` (its triples in selection order) and ``question``.

    ``entity_of_node`` holds ids of ``index.entities``. Entities of ``subgraph.entities`` that no
    selected triple touches (an isolated seed) become entity nodes after the others, so every entity
    the retriever may score has tokens.
    """
    rows = index.triples[subgraph.triples]  # (S, 3)
    triples = [(int(h), index.relations[int(r)], int(t)) for h, r, t in rows]
    extra = [int(e) for e in subgraph.entities]
    return _encode(triples, lambda e: index.entities[e], lambda e: e, extra, tokenizer, question)


def encode_triples(triples: Sequence[tuple[str, str, str]], tokenizer, question: str | None = None) -> LeviGraph:
    """Encode phrase triples ``(head, relation, tail)`` and ``question``.

    Entities are identified by their phrase: equal strings are one node. ``entity_of_node`` numbers the
    distinct entity phrases 0, 1, ... in order of first appearance (head before tail).
    """
    ids: dict[str, int] = {}
    for h, _, t in triples:
        ids.setdefault(h, len(ids))
        ids.setdefault(t, len(ids))
    rows = [(h, r, t) for h, r, t in triples]
    return _encode(rows, lambda e: e, ids.__getitem__, [], tokenizer, question)


def linearise(triples: Sequence[tuple[str, str, str]], tokenizer, question: str | None = None) -> np.ndarray:
    """(L,) int64 token ids of the triples written as text, then the question.

    Each triple is written ``head relation tail`` with the same per-phrase tokenisation as
    :func:`encode_triples`, except that a head equal to the previous triple's tail is not repeated, so a
    path ``e1 -r1-> e2 -r2-> e3`` reads ``e1 r1 e2 r2 e3``. For such a chain the result equals
    ``encode_triples(...).input_ids``.
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


def _encode(triples, entity_text, entity_id, extra: list, tokenizer, question: str | None) -> LeviGraph:
    """Lay out the nodes, then fill positions triple by triple (see the module docstring)."""
    # Nodes in order of first use: entity nodes keyed by entity, a relation node per triple.
    node_text: list[str] = []
    node_entity: list[int] = []
    entity_node: dict[Hashable, int] = {}
    triple_nodes: list[tuple[int, int, int]] = []

    def entity(key) -> int:
        if key not in entity_node:
            entity_node[key] = len(node_text)
            node_text.append(entity_text(key))
            node_entity.append(entity_id(key))
        return entity_node[key]

    for h, r, t in triples:
        head = entity(h)
        node_text.append(r)
        node_entity.append(-1)
        triple_nodes.append((head, len(node_text) - 1, entity(t)))
    for key in extra:
        entity(key)

    distinct = list(dict.fromkeys(node_text))
    tokens_of = dict(zip(distinct, _tokenise(distinct, tokenizer), strict=True))
    node_tokens = [tokens_of[text] for text in node_text]
    for n, toks in enumerate(node_tokens):
        if not toks:
            kind_name = "relation" if node_entity[n] < 0 else f"entity {node_entity[n]}"
            raise ValueError(f"{kind_name} {node_text[n]!r} tokenises to no tokens; every node needs one")
    question_tokens = _tokenise([question], tokenizer)[0] if question else []

    lengths = np.asarray([len(toks) for toks in node_tokens], dtype=np.int64)  # (N,)
    starts = np.concatenate([[0], np.cumsum(lengths)])  # (N + 1,)
    n_graph, n_text = int(starts[-1]), len(question_tokens)
    n_tok = n_graph + n_text

    relative_position = np.zeros((n_tok, n_tok), dtype=np.int64)
    shared = np.zeros((n_graph, n_graph), dtype=bool)  # a triple has set this pair

    for nodes in triple_nodes:
        # Sentence position of each role's first token: head 0, relation l_h, tail l_h + l_r.
        offset = np.concatenate([[0], np.cumsum(lengths[list(nodes)])])[:3]
        for a in range(3):
            for b in range(3):
                if nodes[a] == nodes[b]:
                    continue  # same role, or a self-loop's head and tail: within-node below
                rows = slice(starts[nodes[a]], starts[nodes[a] + 1])
                cols = slice(starts[nodes[b]], starts[nodes[b] + 1])
                pos_a = offset[a] + np.arange(lengths[nodes[a]])  # (l_a,)
                pos_b = offset[b] + np.arange(lengths[nodes[b]])  # (l_b,)
                candidate = pos_b[None, :] - pos_a[:, None]  # (l_a, l_b)
                current = relative_position[rows, cols]  # view
                take = ~shared[rows, cols] | (np.abs(candidate) < np.abs(current))
                current[take] = candidate[take]
                shared[rows, cols] = True

    kind = np.full((n_tok, n_tok), GRAPH_GLOBAL, dtype=np.int8)
    kind[:n_graph, :n_graph][shared] = SAME_TRIPLE
    for n in range(len(node_tokens)):
        span = slice(starts[n], starts[n + 1])
        steps = np.arange(lengths[n])
        relative_position[span, span] = steps[None, :] - steps[:, None]  # (l_n, l_n)
        kind[span, span] = SAME_TRIPLE

    steps = np.arange(n_text)
    relative_position[n_graph:, n_graph:] = steps[None, :] - steps[:, None]  # (L_q, L_q)
    kind[n_graph:, n_graph:] = TEXT_TO_TEXT
    kind[n_graph:, :n_graph] = TEXT_TO_GRAPH
    kind[:n_graph, n_graph:] = GRAPH_TO_TEXT

    input_ids = np.asarray([tok for toks in node_tokens for tok in toks] + list(question_tokens), dtype=np.int64)
    node_of_token = np.concatenate([np.repeat(np.arange(len(lengths)), lengths), np.full(n_text, -1)])
    return LeviGraph(
        input_ids=input_ids,
        node_of_token=node_of_token.astype(np.int64),
        entity_of_node=np.asarray(node_entity, dtype=np.int64),
        relative_position=relative_position,
        kind=kind,
    )
