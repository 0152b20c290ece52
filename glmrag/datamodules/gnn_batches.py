"""Records of the GNN DataModule and the collates that turn a local batch of them into a batch dict.

:class:`QACollate` makes the question batches of
:class:`~glmrag.datamodules.gnn_datamodule.KGQADataModule` (its module docstring is the batch contract),
:class:`KGCCollate` the triple batches of KG-completion pretraining.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from glmrag.index.kg import KGIndex
from glmrag.nn.graph_inputs import seed_weights


@dataclass(frozen=True)
class QARecord:
    kg: str
    question_id: str
    target: tuple[int, ...]
    """Entities of the gold supporting passages."""
    gold: tuple[str, ...]
    question_emb: torch.Tensor | None = field(default=None, compare=False)
    """(d,) sentence embedding of the question when the record carries it (read from chunks); None: the
    collate looks it up by ``question_id``."""

    def row(self, question_emb: torch.Tensor) -> dict[str, Any]:
        """This record with its question's embedding, as a LitData chunk stores it (:class:`ChunkBatches`)."""
        return {
            "kg": self.kg,
            "question_id": self.question_id,
            "target": np.asarray(self.target, dtype=np.int64),
            "gold": list(self.gold),
            "question_emb": question_emb.numpy().astype(np.float32),
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QARecord:
        """The record of a stored :meth:`row`, its embedding with it."""
        target = tuple(int(e) for e in np.asarray(row["target"]).reshape(-1))
        emb = torch.as_tensor(np.asarray(row["question_emb"], dtype=np.float32))
        return cls(str(row["kg"]), str(row["question_id"]), target, tuple(row["gold"]), emb)


class LocalBatches(torch.utils.data.Dataset):
    """Records fetched a local batch at a time: ``dataset[[(i, is_padding), ...]]`` -> list of pairs."""

    def __init__(self, records: Sequence[Any]) -> None:
        self.records = list(records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, batch: list[tuple[int, bool]]) -> list[tuple[Any, bool]]:
        return [(self.records[i], pad) for i, pad in batch]


class ChunkBatches(torch.utils.data.Dataset):
    """:class:`LocalBatches` over question records stored as LitData chunks (``store=litdata``): a local batch
    is read row by row from ``shards`` (:class:`~glmrag.datamodules.chunk_records.ChunkShards`), whose shard ``i``
    holds records ``first[i]:first[i] + counts[i]`` of the split."""

    def __init__(self, shards: Any) -> None:
        self.shards = shards
        self.first = np.cumsum([0, *shards.counts])[:-1]

    def __len__(self) -> int:
        return int(sum(self.shards.counts))

    def __getitem__(self, batch: list[tuple[int, bool]]) -> list[tuple[QARecord, bool]]:
        items = []
        for i, pad in batch:
            shard = int(np.searchsorted(self.first, i, side="right")) - 1
            start = i - int(self.first[shard])
            (row,) = self.shards.rows(shard, start, start + 1)
            items.append((QARecord.from_row(row), pad))
        return items


class QACollate:
    """Turns a local batch of :class:`QARecord` into the batch dict of the module docstring."""

    def __init__(self, indexes: Mapping[str, KGIndex], question_emb: Mapping[str, torch.Tensor], train: bool) -> None:
        self.indexes, self.question_emb, self.train = indexes, question_emb, train

    def _emb(self, record: QARecord) -> torch.Tensor:
        return record.question_emb if record.question_emb is not None else self.question_emb[record.question_id]

    def __call__(self, items: list[tuple[QARecord, bool]]) -> dict[str, Any]:
        records = [r for r, _ in items]
        kg = records[0].kg
        index = self.indexes[kg]
        qids = [r.question_id for r in records]
        target = torch.zeros(len(records), index.num_entities)  # (B, E)
        for row, r in enumerate(records):
            target[row, list(r.target)] = 1.0
        return {
            "kg": kg,
            "question_ids": qids,
            "question_emb": torch.stack([self._emb(r) for r in records]),  # (B, d)
            "seed_weight": seed_weights(index, qids),  # (B, E)
            "target": target,
            "gold": [list(r.gold) for r in records],
            # In training a repeat is one more sample (as DistributedSampler pads); in evaluation it is ignored.
            "real": torch.tensor([self.train or not pad for _, pad in items]),
        }


@dataclass(frozen=True)
class TripleRecord:
    kg: str
    row: int
    """Row of the triple in ``KGIndex.triples``."""


class KGCCollate:
    """Turns a local batch of :class:`TripleRecord` into ``{"kg", "triples": (B, 3) long, "real": (B,) bool}``."""

    def __init__(self, indexes: Mapping[str, KGIndex]) -> None:
        self.indexes = indexes

    def __call__(self, items: list[tuple[TripleRecord, bool]]) -> dict[str, Any]:
        kg = items[0][0].kg
        rows = [r.row for r, _ in items]
        return {
            "kg": kg,
            "triples": torch.as_tensor(self.indexes[kg].triples[rows]),  # (B, 3) head, relation, tail
            "real": torch.ones(len(rows), dtype=torch.bool),
        }
