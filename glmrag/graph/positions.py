"""Graph-aware relative positions and pair kinds of a Levi layout, vectorised.

:func:`graph_positions` expands a compact :class:`~glmrag.graph.levi.LeviLayout` into its ``(L, L)``
relative positions and pair kinds (the rules are in :mod:`glmrag.graph.levi`). The collate
(:class:`~glmrag.datamodules.glm_inputs.GLMCollate`) pays this per question, so nothing loops in Python over
token pairs: each triple's token pairs come as flat arrays, one sort settles conflicts between triples,
and the matrices are filled by flat index. Triple mode is here; path mode is
:mod:`glmrag.graph.path_positions`. :data:`POSITION_CONFLICTS` says how a token pair that several triples
position is decided.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from glmrag.graph.path_positions import _blocks, _relations_private, path_positions

SAME_TRIPLE = 0
"""Kind of a pair inside one node or one triple: read ``relative_position``."""
GRAPH_GLOBAL = 1
"""Kind of a graph pair sharing no triple (the global GLM's extra bucket)."""
TEXT_TO_GRAPH = 2
"""Kind of a question token attending to a graph token."""
GRAPH_TO_TEXT = 3
"""Kind of a graph token attending to a question token."""
TEXT_TO_TEXT = 4
"""Kind of a pair of question tokens: ordinary positions ``j - i``."""
POSITION_MODES = ("triple", "path")
POSITION_CONFLICTS = ("last", "nearest")
"""How a token pair positioned by several triples (parallel or reciprocal edges, self-loops) is decided.

Neither rule is in GLM-RAG or the GLM paper; both come from code:

- ``last`` (the default, the GLM reference code, ``wrapper_functions.py``): within-node positions are
  written first, then every triple in order, each write overwriting the last, so the **last triple** that
  positions a pair decides it. Inside one self-loop ``e r e`` the writes go head -> relation, head -> tail,
  relation -> tail, each with its reverse, token by token: the ``e``-``r`` pairs read ``e`` as the tail,
  and token ``x`` to token ``y`` of ``e`` reads ``(y - x) + (l_e + l_r)`` for ``x > y`` and
  ``(y - x) - (l_e + l_r)`` otherwise (the diagonal included). This is reproduced exactly.
- ``nearest`` (glmrag's earlier rule): the distance of **smallest absolute value** wins; ties go to the
  earliest triple, then to the earlier role pair of :data:`ROLE_PAIRS`; within-node positions override
  every triple.

Both rules decide the two directions of a pair alike, so positions stay antisymmetric (except the diagonal
of a self-loop's entity under ``last``, as in the reference). Path mode ignores the rule.
"""
ROLE_PAIRS = ((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1))
"""(query role, key role) of a triple (0 head, 1 relation, 2 tail), in the tie order of ``nearest``."""


class Layout(Protocol):
    """What :func:`graph_positions` reads of a :class:`~glmrag.graph.levi.LeviLayout` (levi imports this module)."""

    input_ids: np.ndarray
    node_of_token: np.ndarray
    triple_nodes: np.ndarray
    num_question_tokens: int
    linear: bool

    @property
    def num_graph_tokens(self) -> int: ...

    @property
    def num_nodes(self) -> int: ...


def graph_positions(
    layout: Layout, mode: str = "triple", conflict: str = "last", out: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``(L, L)`` int32 relative positions and int8 kinds of ``layout``.

    ``conflict`` (:data:`POSITION_CONFLICTS`) settles pairs that several triples position in ``triple``
    mode. A linear layout is plain text: ordinary positions ``j - i`` and kind :data:`TEXT_TO_TEXT`.
    ``out``: two ``(L, L)`` arrays to fill instead (e.g. views of a batch tensor); the positions one must
    hold zeros (pairs without a position are not written).
    """
    if mode not in POSITION_MODES:
        raise ValueError(f"position mode must be one of {POSITION_MODES}, got {mode!r}")
    if conflict not in POSITION_CONFLICTS:
        raise ValueError(f"position conflict rule must be one of {POSITION_CONFLICTS}, got {conflict!r}")
    n_tok, n_graph = len(layout.input_ids), layout.num_graph_tokens
    if out is None:
        out = np.zeros((n_tok, n_tok), dtype=np.int32), np.empty((n_tok, n_tok), dtype=np.int8)
    relative_position, kind = out
    if relative_position.shape != (n_tok, n_tok) or kind.shape != (n_tok, n_tok):
        raise ValueError(f"out arrays of shapes {relative_position.shape}, {kind.shape}; expected ({n_tok}, {n_tok})")
    if layout.linear:
        steps = np.arange(n_tok, dtype=np.int32)
        relative_position[...] = steps[None, :] - steps[:, None]
        kind[...] = TEXT_TO_TEXT
        return relative_position, kind

    nodes = layout.node_of_token[:n_graph]  # (L_g,)
    lengths = np.bincount(nodes, minlength=layout.num_nodes)  # (N,)
    starts = np.concatenate([[0], np.cumsum(lengths)])  # (N + 1,)
    if mode == "path":
        graph, apart = path_positions(layout.triple_nodes, lengths, starts)  # (L_g, L_g) each
        relative_position[:n_graph, :n_graph] = graph
        kind[:n_graph, :n_graph] = np.where(apart, np.int8(GRAPH_GLOBAL), np.int8(SAME_TRIPLE))  # int8, no wide temp
        writes = []  # within-node pairs are the path positions of d(u, u) = 0
    else:
        kind[:n_graph, :n_graph] = GRAPH_GLOBAL
        if conflict == "last" and _relations_private(layout.triple_nodes, len(lengths)):
            writes = _last_rule_cells(layout.triple_nodes, lengths, starts)
        else:
            within = _within_node_cells(lengths, starts)
            triple = _triple_cells(layout.triple_nodes, lengths, starts, conflict)
            # The reference writes within-node positions first (a self-loop overwrites them); ``nearest`` last.
            writes = [within, triple] if conflict == "last" else [triple, within]
    for row, col, value in writes:
        _scatter(relative_position, row, col, value)
        _scatter(kind, row, col, SAME_TRIPLE)

    steps = np.arange(layout.num_question_tokens, dtype=np.int32)
    relative_position[n_graph:, n_graph:] = steps[None, :] - steps[:, None]  # (L_q, L_q)
    kind[n_graph:, n_graph:] = TEXT_TO_TEXT
    kind[n_graph:, :n_graph] = TEXT_TO_GRAPH
    kind[:n_graph, n_graph:] = GRAPH_TO_TEXT
    return relative_position, kind


def _within_node_cells(lengths: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and position ``k - i`` of every token pair inside one node."""
    block, i, k = _blocks(lengths, lengths)
    first = starts[block]
    return first + i, first + k, (k - i).astype(np.int32)


def _last_rule_cells(
    triple_nodes: np.ndarray, lengths: np.ndarray, starts: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The writes of the ``last`` rule, in order, when relation nodes are private (:func:`_relations_private`).

    A relation token then shares a triple only with its own triple's entities, so only entity pairs can be
    positioned twice: the last triple joining an (unordered) entity pair writes every cell of that pair, and
    the last self-loop on an entity every cell of the entity (over its within-node positions). So no cell is
    written twice and no sort is needed: first the within-node cells and the kept blocks, then the self-loops.
    """
    n_triple, n_node = len(triple_nodes), len(lengths)
    node_length = lengths[triple_nodes]  # (S, 3)
    offset = np.concatenate([np.zeros((n_triple, 1), np.int64), np.cumsum(node_length[:, :2], axis=1)], axis=1)
    head, tail = triple_nodes[:, 0], triple_nodes[:, 2]
    self_loop = head == tail  # (S,)
    pair = np.minimum(head, tail) * n_node + np.maximum(head, tail)  # (S,) unordered entity pair
    _, last_reversed = np.unique(pair[::-1], return_index=True)
    decides = np.zeros(n_triple, dtype=bool)
    decides[n_triple - 1 - last_reversed] = True  # the last triple of each pair
    # Which triples write each role pair, by the role the pair leaves out: relation <-> tail (no head) always (a
    # self-loop's entity reads as its tail), head <-> relation (no tail) unless a self-loop, head <-> tail (no
    # relation) only the deciding triple of a distinct pair.
    keep = {0: np.ones(n_triple, dtype=bool), 2: ~self_loop, 1: decides & ~self_loop}
    first_row, first_col, n_rows, n_cols, base = [starts[:-1]], [starts[:-1]], [lengths], [lengths], [0 * lengths]
    for a, b in ROLE_PAIRS:  # after the within-node blocks
        s = np.flatnonzero(keep[3 - a - b])
        first_row.append(starts[triple_nodes[s, a]])
        first_col.append(starts[triple_nodes[s, b]])
        n_rows.append(node_length[s, a])
        n_cols.append(node_length[s, b])
        base.append(offset[s, b] - offset[s, a])
    block, i, k = _blocks(np.concatenate(n_rows), np.concatenate(n_cols))
    row = np.concatenate(first_row)[block] + i
    col = np.concatenate(first_col)[block] + k
    main = (row, col, (np.concatenate(base)[block] + (k - i)).astype(np.int32))
    return [main, _self_loop_cells(np.flatnonzero(decides & self_loop), triple_nodes, node_length, starts)]


def _self_loop_cells(
    loops: np.ndarray, triple_nodes: np.ndarray, node_length: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and position of the entity-entity cells of self-loops ``loops`` as the reference leaves them
    (module docstring): ``(y - x) + (l_e + l_r)`` for ``x > y``, else ``(y - x) - (l_e + l_r)``."""
    block, x, y = _blocks(node_length[loops, 0], node_length[loops, 0])
    t = loops[block]
    span = node_length[t, 0] + node_length[t, 1]  # l_e + l_r
    first = starts[triple_nodes[t, 0]]
    return first + x, first + y, np.where(x > y, (y - x) + span, (y - x) - span).astype(np.int32)


def _scatter(array: np.ndarray, row: np.ndarray, col: np.ndarray, value: np.ndarray | int) -> None:
    """``array[row, col] = value``, through a flat view when rows are contiguous (10x faster than 2-D indexing)."""
    if not row.size:
        return
    if array.strides[1] != array.itemsize:
        array[row, col] = value
        return
    step = array.strides[0] // array.itemsize  # elements from one row to the next (a batch view: the padded L)
    span = (array.shape[0] - 1) * step + array.shape[1]
    flat = np.lib.stride_tricks.as_strided(array, shape=(span,), strides=(array.itemsize,))
    flat[row * step + col] = value


def _triple_cells(
    triple_nodes: np.ndarray, lengths: np.ndarray, starts: np.ndarray, conflict: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and position of every token pair that shares a triple, each pair once, by ``conflict``."""
    n_triple, n_tok = len(triple_nodes), int(starts[-1])  # n_tok: graph tokens, enough to number the cells
    if n_triple == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty.astype(np.int32)
    node_length = lengths[triple_nodes]  # (S, 3)
    # Sentence position of each role's first token: head 0, relation l_h, tail l_h + l_r.
    offset = np.concatenate([np.zeros((n_triple, 1), np.int64), np.cumsum(node_length[:, :2], axis=1)], axis=1)
    self_loop = triple_nodes[:, 0] == triple_nodes[:, 2]  # (S,)
    cells, values, triples, ranks = [], [], [], []
    for rank, (a, b) in enumerate(ROLE_PAIRS):
        keep = ~self_loop
        if conflict == "nearest" and 1 in (a, b):
            keep[:] = True  # a self-loop's entity meets the relation as head and as tail: both compete
        elif conflict == "last" and {a, b} == {1, 2}:
            keep[:] = True  # the reference writes relation <-> tail after head <-> relation: the tail's wins
        s = np.flatnonzero(keep)
        block, i, k = _blocks(node_length[s, a], node_length[s, b])
        t = s[block]
        cells.append((starts[triple_nodes[t, a]] + i) * n_tok + starts[triple_nodes[t, b]] + k)
        values.append((offset[t, b] + k) - (offset[t, a] + i))
        triples.append(t)
        ranks.append(np.full(len(t), rank))
    if conflict == "last" and self_loop.any():
        s = np.flatnonzero(self_loop)
        row, col, value = _self_loop_cells(s, triple_nodes, node_length, starts)
        cells.append(row * n_tok + col)
        values.append(value)
        triples.append(np.repeat(s, node_length[s, 0] ** 2))
        ranks.append(np.zeros(len(row), dtype=np.int64))
    cell, value, triple = np.concatenate(cells), np.concatenate(values), np.concatenate(triples)
    if conflict == "last":
        # Within one triple every cell appears once, so the order (cell, triple) and the last of each cell.
        order = np.argsort(cell * n_triple + triple, kind="stable")
        cell, value = cell[order], value[order]
        keep = np.append(cell[1:] != cell[:-1], True)  # the last of each cell
    else:
        tie = triple * len(ROLE_PAIRS) + np.concatenate(ranks)  # earlier triple, then earlier role pair
        order = np.lexsort((tie, np.abs(value), cell))
        cell, value = cell[order], value[order]
        keep = np.insert(cell[1:] != cell[:-1], 0, True)  # the nearest of each cell
    cell = cell[keep]
    return cell // n_tok, cell % n_tok, value[keep].astype(np.int32)
