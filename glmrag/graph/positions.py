"""Graph-aware relative positions and pair kinds of a Levi layout, vectorised.

:func:`graph_positions` expands a compact :class:`~glmrag.graph.levi.LeviLayout` into its ``(L, L)``
relative positions and pair kinds (the rules are in the docstring of :mod:`glmrag.graph.levi`). It is
what :class:`~glmrag.models.glm_inputs.GLMCollate` pays per question, so nothing here loops in Python
over tokens or token pairs: every triple's token pairs are generated as flat arrays (one pass per role
pair, a "ragged arange" over the triples), conflicts between triples are settled by one sort, and the
``(L, L)`` matrices are filled by flat index.

Two conflict rules decide a token pair that several triples position (parallel or reciprocal edges,
self-loops; common in OpenIE graphs). Neither is in GLM-RAG or the GLM paper; both come from code:

- ``last`` (the default): the GLM authors' public implementation (Plenz & Frank, "Graph Language
  Models", ACL 2024; ``wrapper_functions.py`` of their repository) writes the within-node positions
  first and then every triple in the given order, each write overwriting the last. So the **last
  triple** that positions a pair decides it. Inside one self-loop ``e r e`` the writes go head -> relation,
  head -> tail, relation -> tail, each with its reverse, token by token: the ``e``-``r`` pairs read ``e``
  as the tail, and the ``e``-``e`` pairs are overwritten as "head copy to tail copy", so token ``x`` to
  token ``y`` of ``e`` reads ``(y - x) + (l_e + l_r)`` for ``x > y`` and ``(y - x) - (l_e + l_r)``
  otherwise (the diagonal included: ``-(l_e + l_r)``). This is reproduced exactly.
- ``nearest`` (glmrag's earlier rule): the distance of **smallest absolute value** wins, ties go to the
  earliest triple (within a triple, to the earlier of head->relation, head->tail, relation->head,
  relation->tail, tail->head, tail->relation); within-node positions override every triple.

Both rules decide the two directions of a pair alike, so positions stay antisymmetric (except the
diagonal of a self-loop's entity under ``last``, as in the reference). Path mode has its own rule (the
shortest directed path, either way round) and ignores the conflict rule.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, dijkstra

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
"""How a token pair positioned by several triples is decided (module docstring); ``last`` = the GLM reference."""
ROLE_PAIRS = ((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1))
"""(query role, key role) of a triple (0 head, 1 relation, 2 tail), in the tie order of ``nearest``."""
ROW_BLOCK = 64
"""Table rows (nodes) expanded at a time in path mode: ``(ROW_BLOCK, L_g)`` scratch tables instead of ``(N, L_g)``
ones; chosen by ``benchmarks/bench_path_positions.py --row-blocks`` (benchmarks/RESULTS.md, path-mode section)."""
TRANSPOSE_STRIPE = 16
"""Rows of ``d(u, v) - d(v, u)`` computed at a time, so the transposed reads stay in cache."""
NO_PATH = -(2**29)
"""Node distance standing for "no path" in int32 tables: negative, and stays so after adding token lengths."""


def graph_positions(
    layout, mode: str = "triple", conflict: str = "last", out: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``(L, L)`` int32 relative positions and int8 kinds of ``layout`` (a :class:`LeviLayout`).

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
        _path_positions(layout.triple_nodes, lengths, starts, relative_position, kind)
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


def _blocks(rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every cell of ``M`` blocks of ``rows[m] x cols[m]`` cells, flat: ``(block, i, k)`` per cell, row-major.

    Shapes: **rows**, **cols** ``(M,)`` -> three ``(sum(rows * cols),)`` arrays.
    """
    size = rows * cols  # (M,)
    block = np.repeat(np.arange(len(size)), size)  # (C,)
    local = np.arange(block.size) - np.repeat(np.cumsum(size) - size, size)  # (C,) cell within its block
    width = cols[block]
    return block, local // width, local % width


def _within_node_cells(lengths, starts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and position ``k - i`` of every token pair inside one node."""
    block, i, k = _blocks(lengths, lengths)
    first = starts[block]
    return first + i, first + k, (k - i).astype(np.int32)


def _relations_private(triple_nodes, n_node: int) -> bool:
    """Whether every relation node serves one triple and no entity slot (as every layout of :mod:`levi` has it)."""
    uses = np.bincount(triple_nodes.reshape(-1), minlength=n_node)  # (N,)
    return bool((uses[triple_nodes[:, 1]] == 1).all())


def _last_rule_cells(triple_nodes, lengths, starts) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
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


def _self_loop_cells(loops, triple_nodes, node_length, starts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and position of the entity-entity cells of self-loops ``loops`` as the reference leaves them
    (module docstring): ``(y - x) + (l_e + l_r)`` for ``x > y``, else ``(y - x) - (l_e + l_r)``."""
    block, x, y = _blocks(node_length[loops, 0], node_length[loops, 0])
    t = loops[block]
    span = node_length[t, 0] + node_length[t, 1]  # l_e + l_r
    first = starts[triple_nodes[t, 0]]
    return first + x, first + y, np.where(x > y, (y - x) + span, (y - x) - span).astype(np.int32)


def _scatter(array: np.ndarray, row: np.ndarray, col: np.ndarray, value) -> None:
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


def _triple_cells(triple_nodes, lengths, starts, conflict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def _path_positions(triple_nodes, lengths, starts, relative_position, kind) -> None:
    """Fill the graph block with sentence positions along the shortest directed Levi-graph path, either way.

    For tokens ``i`` of node ``u`` and ``k`` of node ``v`` (offsets in their nodes), forward
    ``d(u, v) + k - i`` and backward ``k - i - d(v, u)``, with ``d`` the node distances of
    :func:`_node_distances`. Most joined node pairs are joined one way only and take that way. Pairs joined
    both ways (a cycle) are few and decided per token pair afterwards (:func:`_cycle_positions`).

    Distinct nodes are at least a token apart, so ``d(u, v) - d(v, u)`` (0 where there is no path) is the
    node pair's position where it is joined one way only, and 0 where it is joined neither way or is one
    node (joined both ways it means nothing: those cells, kinds included, are rewritten per token pair). Its
    column table ``c_u = d + k`` (``(N, L_g)``, 0 where apart) gives the node's rows: row ``i`` is
    ``c_u - i`` where joined, each row the one before less 1 where joined. Table rows go in blocks that stay
    in cache, longest node first within a block.

    Shapes: **triple_nodes** ``(S, 3)``; **lengths** ``(N,)``; **starts** ``(N + 1,)``;
    **relative_position**, **kind** ``(L, L)`` with ``L >= L_g = starts[-1]`` (the graph block is filled).
    """
    n_node, n_graph = len(lengths), int(starts[-1])
    if not n_node:
        return
    ahead, place, bounds = _node_distances(triple_nodes, lengths)  # (N, N) d(u, v), < 0 where there is no path
    np.maximum(ahead, 0, out=ahead)
    one_way = np.empty_like(ahead)  # (N, N) d(u, v) - d(v, u), rows and columns in ``place`` order
    for lo in range(0, n_node, TRANSPOSE_STRIPE):  # stripes of the transpose stay in cache
        hi = lo + TRANSPOSE_STRIPE
        np.subtract(ahead[lo:hi], ahead[:, lo:hi].T, out=one_way[lo:hi])
    nodes = np.repeat(np.arange(n_node), lengths)  # (L_g,)
    offset = (np.arange(n_graph) - starts[nodes]).astype(np.int32)  # (L_g,) k
    column = place[nodes]  # (L_g,) table column of each token's node
    by_place = np.argsort(place)  # (N,) layout node of each table row
    first, size = starts[by_place], lengths[by_place]  # (N,) its first output row and tokens
    own = np.argsort(column, kind="stable")  # (L_g,) tokens, node by node in table order
    own_bounds = np.searchsorted(column[own], np.arange(n_node + 1))  # (N + 1,)
    graph, graph_kind = relative_position[:n_graph, :n_graph], kind[:n_graph, :n_graph]
    block = min(ROW_BLOCK, n_node)
    by_column = np.empty((block, n_graph), dtype=np.int32)
    together = np.empty((block, n_graph), dtype=np.int32)  # 1 where joined (int32: no casts below)
    apart = np.empty((block, n_graph), dtype=bool)
    # Blocks within runs of table rows sorted longest node first (``bounds``), so the nodes with a token at
    # offset ``step`` lead every block.
    starts_of_blocks = [lo for a, b in zip(bounds[:-1], bounds[1:], strict=True) for lo in range(a, b, block)]
    for lo, hi in zip(starts_of_blocks, [*starts_of_blocks[1:], n_node], strict=True):
        hi = min(hi, lo + block)
        m = hi - lo
        values = np.take(one_way[lo:hi], column, axis=1, out=by_column[:m], mode="clip")  # (m, L_g) d
        np.not_equal(values, 0, out=together[:m], casting="unsafe")
        np.equal(values, 0, out=apart[:m])  # kind: GRAPH_GLOBAL (1) apart, SAME_TRIPLE (0) joined
        mine = own[own_bounds[lo] : own_bounds[hi]]  # tokens of these nodes: a node is joined to itself
        together[column[mine] - lo, mine] = 1
        apart[column[mine] - lo, mine] = False
        values += offset
        values *= together[:m]  # d + k where joined, else 0: the node's first row
        rows = first[lo:hi]
        graph[rows] = values
        graph_kind[rows] = apart[:m].view(np.int8)
        for step in range(1, int(size[lo])):
            n = int(np.count_nonzero(size[lo:hi] > step))  # a prefix: the block is longest first
            values[:n] -= together[:n]  # the next row of a node is this one less 1 where joined
            graph[rows[:n] + step] = values[:n]
            graph_kind[rows[:n] + step] = apart[:n].view(np.int8)
    u, v = _cycle_pairs(triple_nodes, n_node)  # (P,) layout ids of node pairs joined both ways
    forward, backward = ahead[place[u], place[v]], ahead[place[v], place[u]]
    _cycle_positions(u, v, forward, backward, lengths, starts, graph, graph_kind)


def _node_distances(triple_nodes, lengths) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``d(u, v)``: the token length of the shortest directed Levi-graph path from node ``u`` to ``v``.

    An edge ``u -> v`` weighs ``l_u`` (from ``u``'s first token to ``v``'s). With private relation nodes
    (every layout of :mod:`glmrag.graph.levi`) a relation node ``r`` of triple ``(h, r, t)`` has the one
    in-edge from ``h`` and the one out-edge to ``t``, so one Dijkstra over the entity nodes (edge
    ``h -> t`` of weight ``l_h + l_r``, the lightest of parallel triples) gives every distance:
    ``d(r, v) = l_r + d(t, v)``, ``d(u, r) = d(u, h) + l_h``, ``d(r, r) = 0``: the table holds the entities
    first, then the relations. Otherwise one Dijkstra over all ``N`` Levi nodes (:func:`_levi_distances`).
    Within each run of table rows ``bounds[i] : bounds[i + 1]`` nodes come longest first; ``place`` is the
    table row (and column) of each layout node.

    Shapes: **triple_nodes** ``(S, 3)``; **lengths** ``(N,)`` -> ``(N, N)`` int32 (negative where there is
    no path), **place** ``(N,)`` and **bounds** (run boundaries, 0 first, ``N`` last).
    """
    n_node = len(lengths)
    if not _relations_private(triple_nodes, n_node):
        order = np.argsort(-lengths, kind="stable")  # (N,) layout node of each table row
        place = np.empty(n_node, dtype=np.int64)
        place[order] = np.arange(n_node)
        return _levi_distances(triple_nodes, lengths)[np.ix_(order, order)], place, [0, n_node]
    head, relation, tail = triple_nodes.T  # (S,) each
    is_entity = np.ones(n_node, dtype=bool)
    is_entity[relation] = False
    entity = np.flatnonzero(is_entity)
    entity = entity[np.argsort(-lengths[entity], kind="stable")]  # (E,) longest first
    by_length = np.argsort(-lengths[relation], kind="stable")  # (S,) triples, longest relation first
    n_entity = len(entity)
    place = np.empty(n_node, dtype=np.int64)
    place[entity] = np.arange(n_entity)
    place[relation[by_length]] = n_entity + np.arange(len(relation))
    weight = lengths[head] + lengths[relation]  # (S,) h -> t through r
    between = _dijkstra(place[head], place[tail], weight.astype(np.int32), n_entity)  # (E, E)
    head, relation, tail = head[by_length], relation[by_length], tail[by_length]  # in table order
    h, t = place[head], place[tail]  # (S,) entity rows
    l_h, l_r = lengths[head].astype(np.int32), lengths[relation].astype(np.int32)
    dist = np.empty((n_node, n_node), dtype=np.int32)
    dist[:n_entity, :n_entity] = between
    np.add(np.take(between, h, axis=1), l_h, out=dist[:n_entity, n_entity:])  # d(e, r) = d(e, h) + l_h
    np.add(dist[t], l_r[:, None], out=dist[n_entity:])  # d(r, .) = l_r + d(t, .)
    diagonal = np.arange(n_entity, n_node)
    dist[diagonal, diagonal] = 0
    return dist, place, [0, n_entity, n_node]


def _levi_distances(triple_nodes, lengths) -> np.ndarray:
    """:func:`_node_distances` by one Dijkstra over all ``N`` Levi nodes (edges head -> relation -> tail).

    Shapes: **triple_nodes** ``(S, 3)``; **lengths** ``(N,)`` -> ``(N, N)`` int32.
    """
    src, dst = _levi_edges(triple_nodes)
    return _dijkstra(src, dst, lengths[src], len(lengths))


def _levi_edges(triple_nodes) -> tuple[np.ndarray, np.ndarray]:
    """Sources and targets of the Levi graph's edges, head -> relation and relation -> tail of every triple.

    Shapes: **triple_nodes** ``(S, 3)`` -> two ``(2S,)`` arrays.
    """
    return np.concatenate([triple_nodes[:, 0], triple_nodes[:, 1]]), np.concatenate(
        [triple_nodes[:, 1], triple_nodes[:, 2]]
    )


def _dijkstra(src, dst, weight, n_node: int) -> np.ndarray:
    """All-pairs shortest path lengths over edges ``src -> dst`` (the lightest of parallel edges counts).

    In a subgraph most entities are only heads or only tails. Dijkstra runs from the nodes with edges both
    in and out; a node with only out-edges leaves through one of them, to a node whose distances are then
    known, so its row is the least over its edges of ``weight + that row``; a node without out-edges
    reaches only itself.

    Shapes: **src**, **dst**, **weight** ``(E,)`` -> ``(n_node, n_node)`` int32, :data:`NO_PATH` where
    unreachable.
    """
    keep = src != dst  # a self-loop never shortens a path
    src, dst, weight = src[keep], dst[keep], weight[keep].astype(np.float64)
    order = np.lexsort((weight, dst, src))  # by source; the lightest first within each (src, dst)
    src, dst, weight = src[order], dst[order], weight[order]
    first = np.ones(len(src), dtype=bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    src, dst, weight = src[first], dst[first], weight[first]
    has_out = np.bincount(src, minlength=n_node) > 0
    has_in = np.bincount(dst, minlength=n_node) > 0
    far = -NO_PATH  # "no path" while taking minima; sums of it and token lengths stay far
    dist = np.full((n_node, n_node), far, dtype=np.int32)
    dist[np.arange(n_node), np.arange(n_node)] = 0
    interior = np.flatnonzero(has_out & has_in)
    if len(interior):
        adjacency = csr_matrix((weight, (src, dst)), shape=(n_node, n_node))
        found = dijkstra(adjacency, directed=True, indices=interior)  # (K, n), inf where unreachable
        found[np.isinf(found)] = far
        dist[interior] = found
    leaving = ~has_in[src]  # (M,) the edges of nodes with out-edges only, grouped by node
    onward = leaving & has_out[dst]  # ... to a node with distances of its own: through its row
    if onward.any():
        src_on, dst_on, weight_on = src[onward], dst[onward], weight[onward, None].astype(np.int32)
        lead, group = np.unique(src_on, return_index=True)  # most leave through one such edge: take it ...
        dist[lead] = dist[dst_on[group]] + weight_on[group]
        rest = np.ones(len(src_on), dtype=bool)
        rest[group] = False  # ... then the least with the others
        np.minimum.at(dist, src_on[rest], dist[dst_on[rest]] + weight_on[rest])
        dist[lead, lead] = 0
    end = leaving & ~has_out[dst]  # ... to a node without out-edges: that node only (pairs are distinct)
    dist[src[end], dst[end]] = np.minimum(dist[src[end], dst[end]], weight[end].astype(np.int32))
    dist[dist >= far] = NO_PATH
    return dist


def _cycle_pairs(triple_nodes, n_node: int) -> tuple[np.ndarray, np.ndarray]:
    """The ordered pairs ``(u, v)``, ``u != v``, of nodes joined both ways: those of one strongly connected
    component of the Levi graph.

    Shapes: **triple_nodes** ``(S, 3)`` -> two ``(P,)`` arrays.
    """
    src, dst = _levi_edges(triple_nodes)
    adjacency = csr_matrix((np.ones(len(src)), (src, dst)), shape=(n_node, n_node))
    _, component = connected_components(adjacency, directed=True, connection="strong")  # (N,)
    size = np.bincount(component)  # (C,)
    grouped = np.argsort(component, kind="stable")  # (N,) nodes, component by component
    member_size = size[component[grouped]]  # (N,)
    group_start = np.searchsorted(component[grouped], component[grouped])  # (N,) first place of each one's component
    member, _, other = _blocks(np.ones(n_node, dtype=np.int64), member_size)
    u, v = grouped[member], grouped[group_start[member] + other]
    return u[u != v], v[u != v]


def _cycle_positions(u, v, forward, backward, lengths, starts, graph, kind) -> None:
    """Write the token pairs of the node pairs ``(u, v)`` joined both ways into ``graph`` (and ``kind``:
    :data:`SAME_TRIPLE`).

    As ``d(u, v) >= l_u > i - k`` and ``d(v, u) >= l_v > k - i``, forward is positive and backward
    negative, so forward is the nearer exactly when ``2 (k - i) < d(v, u) - d(u, v)``; ties go forward for
    a query before its key in the layout and backward otherwise, so both directions of a pair are decided
    alike (antisymmetric).

    Shapes: **u**, **v**, **forward** ``d(u, v)``, **backward** ``d(v, u)``: ``(P,)``; **graph**, **kind**
    ``(L_g, L_g)``.
    """
    if not len(u):
        return
    pair, i, k = _blocks(lengths[u], lengths[v])  # their token pairs
    row, col = starts[u][pair] + i, starts[v][pair] + k
    forward, backward = forward[pair], backward[pair]
    take_forward = 2 * (k - i) - (col > row) < backward - forward  # ties forward for the query first
    _scatter(graph, row, col, ((k - i) + np.where(take_forward, forward, -backward)).astype(np.int32))
    _scatter(kind, row, col, SAME_TRIPLE)
