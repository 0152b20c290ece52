"""Plain, loop-by-loop position rules, the references of :mod:`glmrag.graph.positions` in the tests.

- :func:`loop_positions`: glmrag's positions as they were computed before vectorisation (one NumPy block
  per triple and role pair; the ``nearest`` rule; path mode as before), kept here only as a reference.
- :func:`reference_glm_positions`: the GLM authors' rules (Plenz & Frank 2024, ``wrapper_functions.py``:
  ``_get_global_graphT5_relativeposition_sparsitymask`` and ``add_text_to_graph_data``) written from
  their description, one token pair at a time: within-node positions first, then every triple in order,
  head tokens outer (head -> relation and back, head -> tail and back), then relation -> tail and back,
  each write overwriting the previous one. Question pairs as ordinary text, graph <-> question kinds 2/3.

Both take a :class:`~glmrag.graph.levi.LeviLayout` and return ``(relative_position, kind)`` (L, L).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path


def _token_ranges(layout):
    n_graph = layout.num_graph_tokens
    nodes = layout.node_of_token[:n_graph]
    lengths = np.bincount(nodes, minlength=layout.num_nodes)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return n_graph, nodes, lengths, starts


def _question_blocks(layout, relative_position, kind) -> None:
    n_graph, n_tok = layout.num_graph_tokens, len(layout.input_ids)
    for i in range(n_graph, n_tok):
        for j in range(n_tok):
            if j >= n_graph:
                relative_position[i, j], kind[i, j] = j - i, 4
            else:
                kind[i, j], kind[j, i] = 2, 3


def reference_glm_positions(layout):
    """The GLM reference's write order, token pair by token pair (module docstring)."""
    n_graph, nodes, lengths, starts = _token_ranges(layout)
    n_tok = len(layout.input_ids)
    relative_position = np.zeros((n_tok, n_tok), dtype=np.int64)
    kind = np.ones((n_tok, n_tok), dtype=np.int8)
    for node in range(layout.num_nodes):
        for i in range(lengths[node]):
            for k in range(lengths[node]):
                relative_position[starts[node] + i, starts[node] + k] = k - i
                kind[starts[node] + i, starts[node] + k] = 0
    for h, r, t in layout.triple_nodes:
        l_h, l_r = lengths[h], lengths[r]
        for ih in range(l_h):
            ph = starts[h] + ih
            for ir in range(l_r):
                pr = starts[r] + ir
                relative_position[ph, pr] = l_h - ih + ir
                relative_position[pr, ph] = -(l_h - ih + ir)
                kind[ph, pr] = kind[pr, ph] = 0
            for it in range(lengths[t]):
                pt = starts[t] + it
                relative_position[ph, pt] = l_h - ih + l_r + it
                relative_position[pt, ph] = -(l_h - ih + l_r + it)
                kind[ph, pt] = kind[pt, ph] = 0
        for ir in range(l_r):
            pr = starts[r] + ir
            for it in range(lengths[t]):
                pt = starts[t] + it
                relative_position[pr, pt] = l_r - ir + it
                relative_position[pt, pr] = -(l_r - ir + it)
                kind[pr, pt] = kind[pt, pr] = 0
    _question_blocks(layout, relative_position, kind)
    return relative_position, kind


def loop_positions(layout, mode: str = "triple"):
    """glmrag's positions before vectorisation (the ``nearest`` rule; path mode as it was)."""
    n_tok = len(layout.input_ids)
    if layout.linear:
        steps = np.arange(n_tok)
        return steps[None, :] - steps[:, None], np.full((n_tok, n_tok), 4, dtype=np.int8)
    n_graph, nodes, lengths, starts = _token_ranges(layout)
    offset_in_node = np.arange(n_graph) - starts[nodes]
    relative_position = np.zeros((n_tok, n_tok), dtype=np.int64)
    kind = np.full((n_tok, n_tok), 1, dtype=np.int8)
    if mode == "triple":
        graph_position, joined = _loop_triple(layout.triple_nodes, lengths, starts, n_graph)
    else:
        graph_position, joined = _old_path(layout.triple_nodes, lengths, nodes, offset_in_node)
    relative_position[:n_graph, :n_graph] = graph_position
    kind[:n_graph, :n_graph][joined] = 0
    same_node = nodes[:, None] == nodes[None, :]
    within = offset_in_node[None, :] - offset_in_node[:, None]
    relative_position[:n_graph, :n_graph][same_node] = within[same_node]
    kind[:n_graph, :n_graph][same_node] = 0
    _question_blocks(layout, relative_position, kind)
    return relative_position, kind


def _loop_triple(triple_nodes, lengths, starts, n_graph):
    relative_position = np.zeros((n_graph, n_graph), dtype=np.int64)
    shared = np.zeros((n_graph, n_graph), dtype=bool)
    for nodes in triple_nodes:
        offset = np.concatenate([[0], np.cumsum(lengths[nodes])])[:3]
        for a in range(3):
            for b in range(3):
                if nodes[a] == nodes[b]:
                    continue
                rows = slice(starts[nodes[a]], starts[nodes[a] + 1])
                cols = slice(starts[nodes[b]], starts[nodes[b] + 1])
                pos_a = offset[a] + np.arange(lengths[nodes[a]])
                pos_b = offset[b] + np.arange(lengths[nodes[b]])
                candidate = pos_b[None, :] - pos_a[:, None]
                current = relative_position[rows, cols]
                take = ~shared[rows, cols] | (np.abs(candidate) < np.abs(current))
                current[take] = candidate[take]
                shared[rows, cols] = True
    return relative_position, shared


def _old_path(triple_nodes, lengths, nodes, offset_in_node):
    n_node = len(lengths)
    edges = np.concatenate([triple_nodes[:, :2], triple_nodes[:, 1:]])
    src, dst = np.unique(edges, axis=0).T if len(edges) else (edges[:, 0], edges[:, 1])
    adjacency = csr_matrix((lengths[src].astype(np.float64), (src, dst)), shape=(n_node, n_node))
    dist = shortest_path(adjacency, method="D", directed=True)
    step = offset_in_node[None, :] - offset_in_node[:, None]
    forward = dist[nodes[:, None], nodes[None, :]] + step
    backward = -(dist[nodes[None, :], nodes[:, None]] - step)
    has_forward, has_backward = np.isfinite(forward), np.isfinite(backward)
    earlier = np.arange(len(nodes))[:, None] < np.arange(len(nodes))[None, :]
    closer = np.abs(forward) < np.abs(backward)
    tie = np.abs(forward) == np.abs(backward)
    use_forward = has_forward & (~has_backward | closer | (tie & earlier))
    position = np.where(use_forward, forward, np.where(has_backward, backward, 0.0))
    return position.astype(np.int64), has_forward | has_backward
