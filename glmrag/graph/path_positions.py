"""Path-mode graph positions of a Levi layout: token distances along the shortest directed path.

:func:`path_positions` fills the graph block for :func:`glmrag.graph.positions.graph_positions` in mode
``path``: a token pair takes the nearer of its forward and backward path distances, and a pair that no
path joins is "apart" (kind ``GRAPH_GLOBAL``). Node distances come from one Dijkstra over the entity nodes
(:func:`_node_distances`). Nothing loops in Python over token pairs. Also home of the two helpers both
modes share, :func:`_blocks` and :func:`_relations_private`.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, dijkstra

ROW_BLOCK = 64
"""Table rows (nodes) expanded at a time in path mode: ``(ROW_BLOCK, L_g)`` scratch tables instead of ``(N, L_g)``
ones; chosen by ``benchmarks/bench_path_positions.py --row-blocks`` (benchmarks/RESULTS.md, path-mode section)."""
TRANSPOSE_STRIPE = 16
"""Rows of ``d(u, v) - d(v, u)`` computed at a time, so the transposed reads stay in cache."""
NO_PATH = -(2**29)
"""Node distance standing for "no path" in int32 tables: negative, and stays so after adding token lengths."""


def path_positions(triple_nodes: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The graph block's sentence positions along the shortest directed Levi-graph path, either way round,
    and where no path joins a token pair.

    For tokens ``i`` of node ``u`` and ``k`` of node ``v`` (offsets in their nodes), forward
    ``d(u, v) + k - i`` and backward ``k - i - d(v, u)``, with ``d`` the node distances of
    :func:`_node_distances`. Most joined node pairs are joined one way only and take that way; the few
    joined both ways (a cycle) are decided per token pair (:func:`_cycle_cells`).

    Distinct nodes are at least a token apart, so ``d(u, v) - d(v, u)`` (0 where there is no path) is the
    node pair's position where it is joined one way only, and 0 where it is joined neither way or is one
    node. Its column table ``c_u = d + k`` (``(N, L_g)``, 0 where apart) gives the node's rows: row ``i`` is
    ``c_u - i`` where joined, each row the one before less 1 where joined. Table rows go in blocks that stay
    in cache, longest node first within a block.

    Shapes: **triple_nodes** ``(S, 3)``; **lengths** ``(N,)``; **starts** ``(N + 1,)`` ->
    **position** ``(L_g, L_g)`` int32 (0 where apart) and **apart** ``(L_g, L_g)`` bool, ``L_g = starts[-1]``.
    """
    n_node, n_graph = len(lengths), int(starts[-1])
    graph = np.zeros((n_graph, n_graph), dtype=np.int32)  # (L_g, L_g)
    graph_apart = np.zeros((n_graph, n_graph), dtype=bool)  # (L_g, L_g)
    if not n_node:
        return graph, graph_apart
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
    block = min(ROW_BLOCK, n_node)
    by_column = np.empty((block, n_graph), dtype=np.int32)
    together = np.empty((block, n_graph), dtype=np.int32)  # 1 where joined (int32: no casts below)
    apart = np.empty((block, n_graph), dtype=bool)  # no path either way
    # Blocks within runs of table rows sorted longest node first (``bounds``), so the nodes with a token at
    # offset ``step`` lead every block.
    starts_of_blocks = [lo for a, b in zip(bounds[:-1], bounds[1:], strict=True) for lo in range(a, b, block)]
    for lo, hi in zip(starts_of_blocks, [*starts_of_blocks[1:], n_node], strict=True):
        hi = min(hi, lo + block)
        m = hi - lo
        values = np.take(one_way[lo:hi], column, axis=1, out=by_column[:m], mode="clip")  # (m, L_g) d
        np.not_equal(values, 0, out=together[:m], casting="unsafe")
        np.equal(values, 0, out=apart[:m])
        mine = own[own_bounds[lo] : own_bounds[hi]]  # tokens of these nodes: a node is joined to itself
        together[column[mine] - lo, mine] = 1
        apart[column[mine] - lo, mine] = False
        values += offset
        values *= together[:m]  # d + k where joined, else 0: the node's first row
        rows = first[lo:hi]
        graph[rows] = values
        graph_apart[rows] = apart[:m]
        for step in range(1, int(size[lo])):
            n = int(np.count_nonzero(size[lo:hi] > step))  # a prefix: the block is longest first
            values[:n] -= together[:n]  # the next row of a node is this one less 1 where joined
            graph[rows[:n] + step] = values[:n]
            graph_apart[rows[:n] + step] = apart[:n]
    u, v = _cycle_pairs(triple_nodes, n_node)  # (P,) layout ids of node pairs joined both ways
    forward, backward = ahead[place[u], place[v]], ahead[place[v], place[u]]
    row, col, value = _cycle_cells(u, v, forward, backward, lengths, starts)
    graph.reshape(-1)[row * n_graph + col] = value  # flat: 10x faster than 2-D indexing
    graph_apart.reshape(-1)[row * n_graph + col] = False
    return graph, graph_apart


def _node_distances(triple_nodes: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
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


def _levi_distances(triple_nodes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """:func:`_node_distances` by one Dijkstra over all ``N`` Levi nodes (edges head -> relation -> tail).

    Shapes: **triple_nodes** ``(S, 3)``; **lengths** ``(N,)`` -> ``(N, N)`` int32.
    """
    src, dst = _levi_edges(triple_nodes)
    return _dijkstra(src, dst, lengths[src], len(lengths))


def _levi_edges(triple_nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sources and targets of the Levi graph's edges, head -> relation and relation -> tail of every triple.

    Shapes: **triple_nodes** ``(S, 3)`` -> two ``(2S,)`` arrays.
    """
    return np.concatenate([triple_nodes[:, 0], triple_nodes[:, 1]]), np.concatenate(
        [triple_nodes[:, 1], triple_nodes[:, 2]]
    )


def _dijkstra(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, n_node: int) -> np.ndarray:
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


def _cycle_pairs(triple_nodes: np.ndarray, n_node: int) -> tuple[np.ndarray, np.ndarray]:
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


def _cycle_cells(
    u: np.ndarray, v: np.ndarray, forward: np.ndarray, backward: np.ndarray, lengths: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and position of every token pair of the node pairs ``(u, v)`` joined both ways.

    As ``d(u, v) >= l_u > i - k`` and ``d(v, u) >= l_v > k - i``, forward is positive and backward
    negative, so forward is the nearer exactly when ``2 (k - i) < d(v, u) - d(u, v)``; ties go forward for
    a query before its key in the layout and backward otherwise, so both directions of a pair are decided
    alike (antisymmetric).

    Shapes: **u**, **v**, **forward** ``d(u, v)``, **backward** ``d(v, u)``: ``(P,)`` -> three ``(C,)`` arrays.
    """
    pair, i, k = _blocks(lengths[u], lengths[v])  # their token pairs
    row, col = starts[u][pair] + i, starts[v][pair] + k
    forward, backward = forward[pair], backward[pair]
    take_forward = 2 * (k - i) - (col > row) < backward - forward  # ties forward for the query first
    return row, col, ((k - i) + np.where(take_forward, forward, -backward)).astype(np.int32)


def _blocks(rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every cell of ``M`` blocks of ``rows[m] x cols[m]`` cells, flat: ``(block, i, k)`` per cell, row-major.

    Shapes: **rows**, **cols** ``(M,)`` -> three ``(sum(rows * cols),)`` arrays.
    """
    size = rows * cols  # (M,)
    block = np.repeat(np.arange(len(size)), size)  # (C,)
    local = np.arange(block.size) - np.repeat(np.cumsum(size) - size, size)  # (C,) cell within its block
    width = cols[block]
    return block, local // width, local % width


def _relations_private(triple_nodes: np.ndarray, n_node: int) -> bool:
    """Whether every relation node serves one triple and no entity slot (every layout of :mod:`glmrag.graph.levi`)."""
    uses = np.bincount(triple_nodes.reshape(-1), minlength=n_node)  # (N,)
    return bool((uses[triple_nodes[:, 1]] == 1).all())
