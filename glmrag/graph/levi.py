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

**Two position modes.** ``"triple"`` (above; the GLM-RAG default) gives a graph pair its sentence
position only when the two tokens share a triple. ``"path"`` extends sentence positions along directed
paths of the Levi graph: a token ``k`` of node ``v`` reachable from node ``u`` by the path
``u -> a -> ... -> v`` lies at ``(l_u - i) + l_a + ... + k`` from token ``i`` of ``u`` (the shortest
such path; the reverse direction is the negative; the smaller ``|.|`` wins where both exist, ties go
forward for the query that comes first in the layout). Only pairs joined by no directed path fall back
to kind 1. On a chain this makes every pair read exactly as the chain written as text, so a GLM in
``"path"`` mode reproduces T5 on the linearised chain, the property the GLM is built on (Plenz & Frank
2024: a GLM reads a path as the LM reads its sentence). This mode is glmrag's extension, not a GLM-RAG
setting; for pairs sharing a triple it agrees with ``"triple"`` unless a shorter path exists elsewhere.

**Compact layout.** :class:`LeviLayout` holds what a Levi graph needs in ``O(L + S)`` numbers (tokens,
node of each token, triples as node ids); :func:`graph_positions` expands it into the ``(L, L)``
matrices. Datasets store layouts and expand them per batch: a 600-triplet subgraph has about 3,300
tokens, and its ``(L, L)`` positions would take 87 MB as int64.

**Linearised layout** (GLM-RAG Table 15, "without graph-aware attention"): :func:`linearise_subgraph`
writes every triple as ``head relation tail`` text, repeating shared entities, read by plain T5 with
ordinary positions; each entity node then owns every copy of its tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

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
POSITION_MODES = ("triple", "path")


@dataclass(frozen=True)
class LeviLayout:
    """The tokens of a Levi graph (or of its linearised text) and its structure, without positions.

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
    """A :class:`LeviLayout` with its pairwise relative positions and pair kinds."""

    relative_position: np.ndarray | None = None
    """(L, L) int64 position of key ``j`` minus position of query ``i``; 0 where ``kind`` is 1, 2 or 3."""
    kind: np.ndarray | None = None
    """(L, L) int8 pair category, one of :data:`SAME_TRIPLE` .. :data:`TEXT_TO_TEXT`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        n_tok = len(self.input_ids)
        for name in ("relative_position", "kind"):
            if getattr(self, name) is None or getattr(self, name).shape != (n_tok, n_tok):
                raise ValueError(f"LeviGraph with {n_tok} tokens needs {name} of shape ({n_tok}, {n_tok})")


def with_positions(layout: LeviLayout, mode: str = "triple") -> LeviGraph:
    """``layout`` and its :func:`graph_positions`."""
    relative_position, kind = graph_positions(layout, mode)
    fields = {name: getattr(layout, name) for name in LeviLayout.__dataclass_fields__}
    return LeviGraph(**fields, relative_position=relative_position, kind=kind)


# -- layouts ---------------------------------------------------------------------------------------


def layout_subgraph(index: KGIndex, subgraph: Subgraph, tokenizer, question: str | None = None) -> LeviLayout:
    """Lay out ``subgraph`` of ``index`` (its triples in selection order) and ``question``.

    ``entity_of_node`` holds ids of ``index.entities``. Entities of ``subgraph.entities`` that no
    selected triple touches (an isolated seed) become entity nodes after the others, so every entity
    the retriever may score has tokens.
    """
    rows = index.triples[subgraph.triples]  # (S, 3)
    triples = [(int(h), index.relations[int(r)], int(t)) for h, r, t in rows]
    extra = [int(e) for e in subgraph.entities]
    return _layout(triples, lambda e: index.entities[e], lambda e: e, extra, tokenizer, question)


def layout_triples(triples: Sequence[tuple[str, str, str]], tokenizer, question: str | None = None) -> LeviLayout:
    """Lay out phrase triples ``(head, relation, tail)`` and ``question``.

    Entities are identified by their phrase: equal strings are one node. ``entity_of_node`` numbers the
    distinct entity phrases 0, 1, ... in order of first appearance (head before tail).
    """
    ids: dict[str, int] = {}
    for h, _, t in triples:
        ids.setdefault(h, len(ids))
        ids.setdefault(t, len(ids))
    return _layout(list(triples), lambda e: e, ids.__getitem__, [], tokenizer, question)


def encode_subgraph(
    index: KGIndex, subgraph: Subgraph, tokenizer, question: str | None = None, mode: str = "triple"
) -> LeviGraph:
    """:func:`layout_subgraph` with its positions."""
    return with_positions(layout_subgraph(index, subgraph, tokenizer, question), mode)


def encode_triples(
    triples: Sequence[tuple[str, str, str]], tokenizer, question: str | None = None, mode: str = "triple"
) -> LeviGraph:
    """:func:`layout_triples` with its positions."""
    return with_positions(layout_triples(triples, tokenizer, question), mode)


def linearise_subgraph(index: KGIndex, subgraph: Subgraph, tokenizer, question: str | None = None) -> LeviLayout:
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
    question_tokens = _tokenise([question], tokenizer)[0] if question else []
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


def _check_nonempty(texts: Sequence[str], tokens: Sequence[list[int]]) -> None:
    for text, toks in zip(texts, tokens, strict=True):
        if not toks:
            raise ValueError(f"node {text!r} tokenises to no tokens; every node needs one")


def _layout(triples, entity_text, entity_id, extra: list, tokenizer, question: str | None) -> LeviLayout:
    """Nodes in order of first use: entity nodes keyed by entity, a relation node per triple."""
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
    _check_nonempty(node_text, node_tokens)
    question_tokens = _tokenise([question], tokenizer)[0] if question else []
    lengths = [len(toks) for toks in node_tokens]
    node_of_token = np.concatenate([np.repeat(np.arange(len(lengths)), lengths), np.full(len(question_tokens), -1)])
    return LeviLayout(
        input_ids=np.asarray([tok for toks in node_tokens for tok in toks] + question_tokens, dtype=np.int64),
        node_of_token=node_of_token.astype(np.int64),
        entity_of_node=np.asarray(node_entity, dtype=np.int64),
        triple_nodes=np.asarray(triple_nodes, dtype=np.int64).reshape(-1, 3),
        num_question_tokens=len(question_tokens),
    )


# -- positions -------------------------------------------------------------------------------------


def graph_positions(layout: LeviLayout, mode: str = "triple") -> tuple[np.ndarray, np.ndarray]:
    """The ``(L, L)`` int64 relative positions and int8 kinds of ``layout`` (see the module docstring).

    A linear layout is plain text: ordinary positions ``j - i`` and kind :data:`TEXT_TO_TEXT` everywhere.
    """
    if mode not in POSITION_MODES:
        raise ValueError(f"position mode must be one of {POSITION_MODES}, got {mode!r}")
    n_tok, n_graph = len(layout.input_ids), layout.num_graph_tokens
    if layout.linear:
        steps = np.arange(n_tok)
        return steps[None, :] - steps[:, None], np.full((n_tok, n_tok), TEXT_TO_TEXT, dtype=np.int8)

    nodes = layout.node_of_token[:n_graph]  # (L_g,)
    lengths = np.bincount(nodes, minlength=layout.num_nodes)  # (N,)
    starts = np.concatenate([[0], np.cumsum(lengths)])  # (N + 1,)
    offset_in_node = np.arange(n_graph) - starts[nodes]  # (L_g,)
    relative_position = np.zeros((n_tok, n_tok), dtype=np.int64)
    kind = np.full((n_tok, n_tok), GRAPH_GLOBAL, dtype=np.int8)
    if mode == "triple":
        graph_position, joined = _triple_positions(layout.triple_nodes, lengths, starts, n_graph)
    else:
        graph_position, joined = _path_positions(layout.triple_nodes, lengths, nodes, offset_in_node)
    relative_position[:n_graph, :n_graph] = graph_position
    kind[:n_graph, :n_graph][joined] = SAME_TRIPLE

    same_node = nodes[:, None] == nodes[None, :]  # (L_g, L_g)
    within = offset_in_node[None, :] - offset_in_node[:, None]  # (L_g, L_g)
    relative_position[:n_graph, :n_graph][same_node] = within[same_node]
    kind[:n_graph, :n_graph][same_node] = SAME_TRIPLE

    steps = np.arange(layout.num_question_tokens)
    relative_position[n_graph:, n_graph:] = steps[None, :] - steps[:, None]  # (L_q, L_q)
    kind[n_graph:, n_graph:] = TEXT_TO_TEXT
    kind[n_graph:, :n_graph] = TEXT_TO_GRAPH
    kind[:n_graph, n_graph:] = GRAPH_TO_TEXT
    return relative_position, kind


def _triple_positions(triple_nodes, lengths, starts, n_graph) -> tuple[np.ndarray, np.ndarray]:
    """Sentence positions of pairs sharing a triple: smallest ``|.|`` wins, ties to the earliest triple."""
    relative_position = np.zeros((n_graph, n_graph), dtype=np.int64)
    shared = np.zeros((n_graph, n_graph), dtype=bool)  # a triple has set this pair
    for nodes in triple_nodes:
        # Sentence position of each role's first token: head 0, relation l_h, tail l_h + l_r.
        offset = np.concatenate([[0], np.cumsum(lengths[nodes])])[:3]
        for a in range(3):
            for b in range(3):
                if nodes[a] == nodes[b]:
                    continue  # same role, or a self-loop's head and tail: within-node positions instead
                rows = slice(starts[nodes[a]], starts[nodes[a] + 1])
                cols = slice(starts[nodes[b]], starts[nodes[b] + 1])
                pos_a = offset[a] + np.arange(lengths[nodes[a]])  # (l_a,)
                pos_b = offset[b] + np.arange(lengths[nodes[b]])  # (l_b,)
                candidate = pos_b[None, :] - pos_a[:, None]  # (l_a, l_b)
                current = relative_position[rows, cols]  # view
                take = ~shared[rows, cols] | (np.abs(candidate) < np.abs(current))
                current[take] = candidate[take]
                shared[rows, cols] = True
    return relative_position, shared


def _path_positions(triple_nodes, lengths, nodes, offset_in_node) -> tuple[np.ndarray, np.ndarray]:
    """Sentence positions along the shortest directed Levi-graph path, either way round."""
    n_node = len(lengths)
    # Edge u -> v weighs l_u: the distance from u's first token to v's first token along the path.
    edges = np.concatenate([triple_nodes[:, :2], triple_nodes[:, 1:]])  # (2S, 2)
    src, dst = np.unique(edges, axis=0).T if len(edges) else (edges[:, 0], edges[:, 1])  # (E,) each, no repeats
    adjacency = csr_matrix((lengths[src].astype(np.float64), (src, dst)), shape=(n_node, n_node))
    dist = shortest_path(adjacency, method="D", directed=True)  # (N, N), inf where unreachable
    step = offset_in_node[None, :] - offset_in_node[:, None]  # (L_g, L_g) k - i
    forward = dist[nodes[:, None], nodes[None, :]] + step  # (L_g, L_g) i of u -> k of v
    backward = -(dist[nodes[None, :], nodes[:, None]] - step)  # (L_g, L_g) k of v -> i of u, negated
    has_forward, has_backward = np.isfinite(forward), np.isfinite(backward)
    # Ties go forward for a query before its key in the layout and backward otherwise, so that both
    # directions of a pair are decided alike and the positions stay antisymmetric.
    earlier = np.arange(len(nodes))[:, None] < np.arange(len(nodes))[None, :]  # (L_g, L_g)
    closer = np.abs(forward) < np.abs(backward)
    tie = np.abs(forward) == np.abs(backward)
    use_forward = has_forward & (~has_backward | closer | (tie & earlier))
    position = np.where(use_forward, forward, np.where(has_backward, backward, 0.0))
    return position.astype(np.int64), has_forward | has_backward
