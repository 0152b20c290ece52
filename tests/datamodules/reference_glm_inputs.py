"""glmrag's GLM input pipeline as it was before the vectorised layout (main at 7dd2dcb), the reference of the
equality tests: a Python loop over triples that tokenises each node's phrase, positions written pair by pair
through 2-D indexing (the sort-based ``last``/``nearest`` cells of :mod:`glmrag.graph.positions`, which stay
there for layouts with shared relation nodes), and a collate that pads with ``torch.zeros``. Kept only here.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from glmrag.datamodules.glm_inputs import record_layout
from glmrag.graph.levi import LeviLayout
from glmrag.graph.positions import _triple_cells, _within_node_cells


def old_layout_subgraph(index, subgraph, tokenizer, question, eos) -> LeviLayout:
    """Nodes in order of first use: entity nodes keyed by entity, a relation node per triple, then isolated seeds."""
    node_text, node_entity, entity_node, triple_nodes = [], [], {}, []

    def entity(e: int) -> int:
        if e not in entity_node:
            entity_node[e] = len(node_text)
            node_text.append(index.entities[e])
            node_entity.append(e)
        return entity_node[e]

    for h, r, t in index.triples[subgraph.triples]:
        head = entity(int(h))
        node_text.append(index.relations[int(r)])
        node_entity.append(-1)
        triple_nodes.append((head, len(node_text) - 1, entity(int(t))))
    for e in subgraph.entities:
        entity(int(e))
    node_tokens = [tokenizer([text], add_special_tokens=False)["input_ids"][0] for text in node_text]
    question_tokens = tokenizer([question], add_special_tokens=False)["input_ids"][0] if question else []
    if question and eos:
        end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        question_tokens = [*question_tokens, end]
    lengths = [len(toks) for toks in node_tokens]
    node_of_token = np.concatenate([np.repeat(np.arange(len(lengths)), lengths), np.full(len(question_tokens), -1)])
    return LeviLayout(
        input_ids=np.asarray([tok for toks in node_tokens for tok in toks] + question_tokens, dtype=np.int64),
        node_of_token=node_of_token.astype(np.int64),
        entity_of_node=np.asarray(node_entity, dtype=np.int64),
        triple_nodes=np.asarray(triple_nodes, dtype=np.int64).reshape(-1, 3),
        num_question_tokens=len(question_tokens),
    )


def old_triple_positions(layout: LeviLayout, conflict: str = "last") -> tuple[np.ndarray, np.ndarray]:
    """``triple`` mode as before: every cell of every triple, a sort to settle conflicts, 2-D writes."""
    n_tok, n_graph = len(layout.input_ids), layout.num_graph_tokens
    relative_position, kind = np.zeros((n_tok, n_tok), dtype=np.int32), np.empty((n_tok, n_tok), dtype=np.int8)
    lengths = np.bincount(layout.node_of_token[:n_graph], minlength=layout.num_nodes)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    kind[:n_graph, :n_graph] = 1
    within = _within_node_cells(lengths, starts)
    triple = _triple_cells(layout.triple_nodes, lengths, starts, conflict)
    for row, col, value in [within, triple] if conflict == "last" else [triple, within]:
        relative_position[row, col] = value
        kind[row, col] = 0
    steps = np.arange(layout.num_question_tokens, dtype=np.int32)
    relative_position[n_graph:, n_graph:] = steps[None, :] - steps[:, None]
    kind[n_graph:, n_graph:], kind[n_graph:, :n_graph], kind[:n_graph, n_graph:] = 4, 2, 3
    return relative_position, kind


def old_collate(records, positions=old_triple_positions, pad_to_multiple: int = 8) -> dict[str, torch.Tensor]:
    """The tensors of ``GLMCollate`` as before: ``torch.zeros`` batches filled row by row."""
    layouts = [record_layout(r) for r in records]
    length = pad_to_multiple * max(1, math.ceil(max(len(x.input_ids) for x in layouts) / pad_to_multiple))
    num_nodes, batch = max(1, max(x.num_nodes for x in layouts)), len(records)
    out = {
        "input_ids": torch.zeros(batch, length, dtype=torch.long),
        "token_mask": torch.zeros(batch, length, dtype=torch.bool),
        "question_mask": torch.zeros(batch, length, dtype=torch.bool),
        "relative_position": torch.zeros(batch, length, length, dtype=torch.int32),
        "kind": torch.zeros(batch, length, length, dtype=torch.int8),
        "node_of_token": torch.full((batch, length), -1, dtype=torch.long),
        "entity_of_node": torch.full((batch, num_nodes), -1, dtype=torch.long),
        "target": torch.zeros(batch, num_nodes, dtype=torch.float32),
    }
    for row, (record, layout) in enumerate(zip(records, layouts, strict=True)):
        n_tok, n_node = len(layout.input_ids), layout.num_nodes
        position, kind = positions(layout)
        out["relative_position"][row, :n_tok, :n_tok] = torch.from_numpy(position)
        out["kind"][row, :n_tok, :n_tok] = torch.from_numpy(kind)
        out["input_ids"][row, :n_tok] = torch.from_numpy(layout.input_ids)
        out["token_mask"][row, :n_tok] = True
        out["question_mask"][row, layout.num_graph_tokens : n_tok] = True
        out["node_of_token"][row, :n_tok] = torch.from_numpy(layout.node_of_token)
        out["entity_of_node"][row, :n_node] = torch.from_numpy(layout.entity_of_node)
        out["target"][row, np.asarray(record["target_nodes"], dtype=np.int64)] = 1.0
    out["node_mask"] = out["entity_of_node"] >= 0
    return out
