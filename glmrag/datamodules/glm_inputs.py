"""One question -> one stored GLM record, and the collate that pads records into a batch.

The GLM retriever (GLM-RAG Sec. 3) reads, per question, a budgeted subgraph around the question's seed
entities (:func:`glmrag.graph.subgraph.select_subgraph`, GLM-RAG App. B.2) written as a Levi graph
(:func:`glmrag.graph.levi.layout_subgraph`) or, for the GLM-RAG Table 15 baseline, as linear text
(:func:`glmrag.graph.levi.linearise_subgraph`). :func:`question_record` stores the compact
:class:`~glmrag.graph.levi.LeviLayout` of that subgraph (``O(L + S)`` numbers) as one record of
:mod:`~glmrag.datamodules.chunk_records`;
:class:`GLMCollate` expands each layout into its ``(L, L)`` relative positions and pair kinds
(:func:`glmrag.graph.levi.graph_positions`) only when a batch is built, so the position mode is a
collate-time choice and records are shared by both modes.

A question without seed entities gets an empty subgraph: its record has no nodes, and only question
tokens (``use_text``) or no tokens at all. Such a row has ``node_mask`` all False, and with
``use_text=False`` also ``token_mask`` all False; the model must keep fully masked rows finite.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import transformers

from glmrag.data.types import Question
from glmrag.graph.levi import (
    POSITION_CONFLICTS,
    POSITION_MODES,
    LeviLayout,
    graph_positions,
    layout_subgraph,
    linearise_subgraph,
)
from glmrag.graph.subgraph import MAX_HOPS, MAX_TRIPLETS, select_subgraph
from glmrag.index.embed import resolve_model_path
from glmrag.index.kg import KGIndex

LAYOUTS = ("graph", "linear")


def load_tokenizer(name: str):
    """The tokenizer of ``name`` (a hub name, a folder, or an ``offline:`` model of :mod:`glmrag.index.embed`)."""
    return transformers.AutoTokenizer.from_pretrained(resolve_model_path(name))


@dataclass
class SubgraphSettings:
    """What decides the stored subgraph of a question (and, for ``position_mode``, its positions)."""

    max_hops: int = MAX_HOPS
    """GLM-RAG App. B.2: "we set max_hops=2"."""
    max_triplets: int = MAX_TRIPLETS
    """GLM-RAG App. B.2: "we set ... max_triplets=600"."""
    layout: str = "graph"
    """``graph``: the Levi graph; ``linear``: triples written as text (GLM-RAG Table 15, no graph-aware attention)."""
    use_text: bool = True
    """Append the question's tokens (GLM-RAG App. B "FullyConnected", the default); False: graph tokens only."""
    position_mode: str = "triple"
    """``triple`` (GLM-RAG) or ``path``; applied by :class:`GLMCollate` (stored, and in :meth:`key`, only when
    the DataModule precomputes positions)."""
    seed: int = 0
    """Seed of the randomized BFS of :func:`~glmrag.graph.subgraph.select_subgraph`, mixed with the question id."""
    question_eos: bool = True
    """End the appended question with ``</s>`` (the tokenizer's EOS), as the GLM reference code does (Plenz &
    Frank 2024, ``add_text_to_graph_data``); not stated in GLM-RAG. False: question tokens only."""
    position_conflict: str = "last"
    """Which triple positions a token pair several triples position (:mod:`glmrag.graph.positions`): ``last``
    as the GLM reference code, or ``nearest`` (the nearest triple's). Not in GLM-RAG. In :meth:`key` although
    only the collate applies it (unless positions are precomputed), so a cache folder names every rule it was
    made for."""

    def __post_init__(self) -> None:
        for name in ("max_hops", "max_triplets"):  # the config check runs this rule (no subgraph without both)
            self.check_budget(name, getattr(self, name))
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.position_mode not in POSITION_MODES:
            raise ValueError(f"position_mode must be one of {POSITION_MODES}, got {self.position_mode!r}")
        if self.position_conflict not in POSITION_CONFLICTS:
            raise ValueError(f"position_conflict must be one of {POSITION_CONFLICTS}, got {self.position_conflict!r}")
        for name in ("use_text", "question_eos"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    @staticmethod
    def check_budget(name: str, value: Any, allow_none: bool = False) -> None:
        """The rule of ``max_hops`` and ``max_triplets``: an integer >= 1 (or None when ``allow_none``, for a
        GNN's whole-KG run); a ValueError naming the config key otherwise."""
        if value is None and allow_none:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            allowed = "an integer >= 1" + (" or null (the whole KG, GFM-RAG)" if allow_none else "")
            raise ValueError(f"model.subgraph.{name}={value!r}: must be {allowed}")

    def key(self, precompute: bool = False) -> str:
        """A readable cache key of everything a stored record depends on, e.g. ``h2-t600-graph-text-eos-last-s0``;
        ``precompute``: the records store their positions, so the mode is in the key."""
        text = "text" if self.use_text else "notext"
        eos = "eos" if self.question_eos else "noeos"
        stored = f"-pos-{self.position_mode}" if precompute else ""
        rules = f"{eos}-{self.position_conflict}{stored}"
        return f"h{self.max_hops}-t{self.max_triplets}-{self.layout}-{text}-{rules}-s{self.seed}"

    def bfs_seed(self, question_id: str) -> int:
        """The BFS seed of one question: independent across questions, fixed across runs."""
        digest = hashlib.sha256(f"{self.seed}:{question_id}".encode()).digest()
        return int.from_bytes(digest[:8], "little")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def question_record(
    index: KGIndex,
    question: Question,
    kg_name: str,
    tokenizer,
    settings: SubgraphSettings,
    question_emb: np.ndarray,
    precompute: bool = False,
) -> dict[str, Any]:
    """The stored record of ``question``: its subgraph's layout, targets and gold.

    ``target_nodes`` are the entity nodes whose entity is mentioned in a gold supporting passage
    (``index.entities_of_passages``, GFM-RAG's targets) and lies in the subgraph. ``triple_nodes`` is the
    ``(S, 3)`` array flattened row-major. With ``precompute`` the record also holds the ``(L, L)`` relative
    positions (int16) and pair kinds (int8), row-major.
    """
    emb = np.asarray(question_emb, dtype=np.float32)
    if emb.ndim != 1:
        raise ValueError(f"question {question.id} of {kg_name}: question_emb has shape {emb.shape}, expected (d,)")
    subgraph = select_subgraph(
        index, index.seeds(question.id), settings.max_hops, settings.max_triplets, seed=settings.bfs_seed(question.id)
    )
    encode = linearise_subgraph if settings.layout == "linear" else layout_subgraph
    layout = encode(index, subgraph, tokenizer, question.question if settings.use_text else None, settings.question_eos)
    supporting = np.asarray(index.entities_of_passages(list(question.supporting)), dtype=np.int64)
    target_nodes = np.flatnonzero(np.isin(layout.entity_of_node, supporting))
    record = {
        "kg": kg_name,
        "question_id": question.id,
        "input_ids": layout.input_ids.astype(np.int32),
        "node_of_token": layout.node_of_token.astype(np.int32),
        "entity_of_node": layout.entity_of_node.astype(np.int64),
        "triple_nodes": layout.triple_nodes.reshape(-1).astype(np.int32),  # (3S,)
        "num_question_tokens": int(layout.num_question_tokens),
        "linear": bool(layout.linear),
        "target_nodes": target_nodes.astype(np.int32),
        "gold": list(question.supporting),
        "question_emb": emb,
        "truncated": bool(subgraph.truncated),
        "num_triples": len(subgraph),
        "num_tokens": len(layout.input_ids),
    }
    if precompute:
        position, kind = graph_positions(layout, settings.position_mode, settings.position_conflict)
        if len(position) and np.abs(position).max() > np.iinfo(np.int16).max:
            raise ValueError(f"question {question.id} of {kg_name}: positions exceed int16; precompute=false")
        record["relative_position"] = position.astype(np.int16).reshape(-1)  # (L * L,)
        record["kind"] = kind.reshape(-1)  # (L * L,)
    return record


def record_layout(record: Mapping[str, Any]) -> LeviLayout:
    """The :class:`LeviLayout` a record was made from (lists or arrays)."""
    return LeviLayout(
        input_ids=np.asarray(record["input_ids"], dtype=np.int64),
        node_of_token=np.asarray(record["node_of_token"], dtype=np.int64),
        entity_of_node=np.asarray(record["entity_of_node"], dtype=np.int64),
        triple_nodes=np.asarray(record["triple_nodes"], dtype=np.int64).reshape(-1, 3),  # (S, 3)
        num_question_tokens=int(record["num_question_tokens"]),
        linear=bool(record["linear"]),
    )


def position_dtype(length: int) -> type[np.signedinteger]:
    """The narrowest dtype of the ``(B, L, L)`` positions of a batch padded to ``length`` tokens: int16 up to
    32,767 tokens, else int32.

    A position is a distance in tokens between two tokens of one record: inside the sentence of a triple of
    distinct nodes, along a path of distinct nodes, or between question tokens (all below ``length``), or,
    under the ``last`` rule, from a self-loop's entity to itself (``-(l_e + l_r)`` on the diagonal; module
    docstring of :mod:`glmrag.graph.positions`). So ``|position| <= length``. int16 halves the pages a batch
    allocates and the kernel zeroes on first touch (benchmarks/RESULTS.md, "GLM input pipeline, third pass"); the model
    casts positions to int64 before bucketing (:func:`glmrag.nn.glm.graph_buckets`), so the buckets are the same.
    """
    return np.int16 if length <= np.iinfo(np.int16).max else np.int32


class GLMCollate:
    """Pads a list of records into one batch; positions are expanded here, per batch (or copied, when the
    records carry them: ``datamodule.precompute``), straight into the batch tensors.

    Records may come from different KGs (``kg`` is per row). A record may carry ``real`` (default True):
    the DataModule sets it False on evaluation padding rows (repeats that even out DDP ranks).

    Shapes: ``B`` records; ``L`` = the longest record's token count rounded up to ``pad_to_multiple``
    (at least ``pad_to_multiple``); ``N`` = the most nodes of a record (at least 1); ``d`` = 384.

    ====================  ===============  =======  ===========================================================
    key                   shape            dtype    value
    ====================  ===============  =======  ===========================================================
    ``kg``                list (B)         str      dataset (KG) of each row
    ``question_ids``      list (B)         str
    ``input_ids``         (B, L)           int64    token ids; 0 on padding
    ``token_mask``        (B, L)           bool     real tokens
    ``question_mask``     (B, L)           bool     question tokens (the last ``num_question_tokens`` real ones)
    ``relative_position`` (B, L, L)        int16    :func:`~glmrag.graph.levi.graph_positions`; 0 on padding
                                           (int32 above 32,767 tokens: :func:`position_dtype`)
    ``kind``              (B, L, L)        int8     pair kinds 0..4; 0 on padding pairs (mask keys by token_mask)
    ``node_of_token``     (B, L)           int64    node of each token; -1 for question, padding, linear relations
    ``entity_of_node``    (B, N)           int64    entity id in ``index(kg)``; -1 for relation nodes and padding
    ``node_mask``         (B, N)           bool     entity nodes (``entity_of_node >= 0``)
    ``target``            (B, N)           float32  1 on entity nodes of supporting entities
    ``question_emb``      (B, d)           float32  the question's sentence embedding
    ``gold``              list (B) of list str      gold passage ids
    ``real``              (B,)             bool     False for evaluation padding rows
    ====================  ===============  =======  ===========================================================
    """

    def __init__(
        self, position_mode: str = "triple", pad_to_multiple: int = 8, position_conflict: str = "last"
    ) -> None:
        if position_mode not in POSITION_MODES:
            raise ValueError(f"position_mode must be one of {POSITION_MODES}, got {position_mode!r}")
        if position_conflict not in POSITION_CONFLICTS:
            raise ValueError(f"position_conflict must be one of {POSITION_CONFLICTS}, got {position_conflict!r}")
        if pad_to_multiple < 1:
            raise ValueError(f"pad_to_multiple must be >= 1, got {pad_to_multiple}")
        self.position_mode, self.pad_to_multiple = position_mode, pad_to_multiple
        self.position_conflict = position_conflict

    def __call__(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not records:
            raise ValueError("GLMCollate got an empty batch; every batch needs at least one record")
        layouts = [record_layout(r) for r in records]
        multiple = self.pad_to_multiple
        length = multiple * max(1, math.ceil(max(len(x.input_ids) for x in layouts) / multiple))
        num_nodes = max(1, max(x.num_nodes for x in layouts))
        batch = len(records)
        input_ids = torch.zeros(batch, length, dtype=torch.long)
        token_mask = torch.zeros(batch, length, dtype=torch.bool)
        question_mask = torch.zeros(batch, length, dtype=torch.bool)
        # np.zeros takes fresh zeroed pages from the OS (calloc) where torch.zeros writes every byte once more:
        # 12x slower for a (2, 2400, 2400) int32 batch, of which positions touch a small part (benchmarks/RESULTS.md).
        relative_position = torch.from_numpy(np.zeros((batch, length, length), dtype=position_dtype(length)))
        kind = torch.from_numpy(np.zeros((batch, length, length), dtype=np.int8))
        node_of_token = torch.full((batch, length), -1, dtype=torch.long)
        entity_of_node = torch.full((batch, num_nodes), -1, dtype=torch.long)
        target = torch.zeros(batch, num_nodes, dtype=torch.float32)
        for row, (record, layout) in enumerate(zip(records, layouts, strict=True)):
            n_tok, n_node = len(layout.input_ids), layout.num_nodes
            position_out = relative_position[row, :n_tok, :n_tok].numpy()  # (n_tok, n_tok) views of the batch
            kind_out = kind[row, :n_tok, :n_tok].numpy()
            if "relative_position" in record:  # precomputed (datamodule.precompute): only copied
                position_out[...] = np.asarray(record["relative_position"]).reshape(n_tok, n_tok)
                kind_out[...] = np.asarray(record["kind"]).reshape(n_tok, n_tok)
            else:
                graph_positions(layout, self.position_mode, self.position_conflict, out=(position_out, kind_out))
            # Copied through NumPy views: streamed records may be read-only arrays, which torch refuses to wrap.
            input_ids[row, :n_tok].numpy()[...] = layout.input_ids
            token_mask[row, :n_tok] = True
            question_mask[row, layout.num_graph_tokens : n_tok] = True
            node_of_token[row, :n_tok].numpy()[...] = layout.node_of_token
            entity_of_node[row, :n_node].numpy()[...] = layout.entity_of_node
            target[row, np.asarray(record["target_nodes"], dtype=np.int64)] = 1.0
        return {
            "kg": [str(r["kg"]) for r in records],
            "question_ids": [str(r["question_id"]) for r in records],
            "input_ids": input_ids,
            "token_mask": token_mask,
            "question_mask": question_mask,
            "relative_position": relative_position,
            "kind": kind,
            "node_of_token": node_of_token,
            "entity_of_node": entity_of_node,
            "node_mask": entity_of_node >= 0,
            "target": target,
            "question_emb": torch.stack([torch.tensor(np.asarray(r["question_emb"], np.float32)) for r in records]),
            "gold": [list(r["gold"]) for r in records],
            "real": torch.tensor([bool(r.get("real", True)) for r in records], dtype=torch.bool),
        }
