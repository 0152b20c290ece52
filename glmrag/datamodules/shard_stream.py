"""The shard stream: one rank's batches of record shards, read once per epoch.

:class:`RankStream` cuts an epoch's records into one contiguous part per (rank, DataLoader worker), so
each worker reads only its own shards; :class:`StreamBatchSampler` hands the epoch to (persistent)
workers. Every reader yields the same number of batches, or DDP would hang at the epoch's end. The shards
are LitData chunks in a local folder or object storage (:class:`~glmrag.datamodules.chunk_records.ChunkShards`);
:mod:`glmrag.datamodules.subgraph_data` writes them and builds the loaders.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DistributedSampler

from glmrag.datamodules.resumable import ResumableSampler


class RankStream(torch.utils.data.Dataset):
    """The batches of one rank over record shards: ``stream[(epoch, b)]`` -> list of records (batch ``b``).

    ``shards`` holds ``shards.counts[i]`` records in shard ``i`` and reads records ``start:stop`` of shard ``i``
    in their stored order as ``shards.rows(i, start, stop)`` (:class:`~glmrag.datamodules.chunk_records.ChunkShards`).
    Each epoch the shards are ordered (shuffled per epoch when ``shuffle``) and their records, in that
    order, cut into ``world_size x readers`` contiguous parts of sizes differing by at most one. Rank
    ``r`` owns parts ``r * readers + w`` (``w < readers``, one per DataLoader worker), and reader ``w``
    reads only the shards its part overlaps. Batch ``b`` is the ``b // readers``-th batch of reader
    ``b % readers`` (the DataLoader hands batch ``b`` to worker ``b % num_workers``, so a worker reads
    only its own part). Every reader yields the same number of batches, ``ceil(ceil(count / parts) /
    batch_size)``, topping up with one-record batches that repeat a record, ``real`` = ``pad_real``; so
    every rank yields the same number of batches, or DDP would hang at the epoch's end. When
    ``shuffle``, a reader also shuffles its part through a buffer of ``buffer_size`` records. Requests
    are served from a live iterator per reader, so consecutive batches cost one pass.
    """

    def __init__(
        self,
        shards: Any,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        readers: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        buffer_size: int = 1024,
        pad_real: bool = False,
    ) -> None:
        if batch_size < 1 or readers < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"need batch_size >= 1, readers >= 1 and 0 <= rank < world_size, got {batch_size}, {readers}, "
                f"{rank}, {world_size}"
            )
        self.shards, self.counts, self.batch_size = shards, list(shards.counts), batch_size
        self.rank, self.world_size, self.readers = rank, world_size, readers
        self.shuffle, self.seed, self.buffer_size, self.pad_real = shuffle, seed, buffer_size, pad_real
        self.count = sum(self.counts)
        parts = world_size * readers
        self.per_reader = math.ceil(math.ceil(self.count / parts) / batch_size) if self.count else 0
        self.num_batches = self.per_reader * readers
        self._live: dict[int, tuple[int, Iterator[list[dict[str, Any]]], int]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_live": {}}  # generators do not pickle

    def __len__(self) -> int:
        return self.num_batches

    def shard_order(self, epoch: int) -> list[int]:
        """The shards in the order their records are numbered in ``epoch``."""
        if not self.shuffle:
            return list(range(len(self.counts)))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.counts)).tolist()

    def part(self, epoch: int, reader: int) -> list[tuple[int, int, int]]:
        """``(shard, first_row, stop_row)`` slices making up this rank's part ``reader`` in ``epoch``."""
        parts = self.world_size * self.readers
        j = self.rank * self.readers + reader
        lo, hi = j * self.count // parts, (j + 1) * self.count // parts
        slices, start = [], 0
        for shard in self.shard_order(epoch):
            stop = start + self.counts[shard]
            if start < hi and lo < stop:
                slices.append((shard, max(lo, start) - start, min(hi, stop) - start))
            start = stop
        return slices

    def _rows(self, epoch: int, reader: int) -> Iterator[dict[str, Any]]:
        rows = (row for shard, a, b in self.part(epoch, reader) for row in self.shards.rows(shard, a, b))
        if not self.shuffle:
            yield from rows
            return
        rng = np.random.default_rng([self.seed, epoch, self.rank, reader])
        buffer: list[dict[str, Any]] = []
        for row in rows:
            if len(buffer) < self.buffer_size:
                buffer.append(row)
                continue
            i = int(rng.integers(len(buffer)))
            yield buffer[i]
            buffer[i] = row
        rng.shuffle(buffer)
        yield from buffer

    def batches(self, epoch: int, reader: int) -> Iterator[list[dict[str, Any]]]:
        """Reader ``reader``'s ``per_reader`` batches of ``epoch``: its part, then one-record top-ups."""
        batch: list[dict[str, Any]] = []
        made, first = 0, None
        for row in self._rows(epoch, reader):
            first = row if first is None else first
            batch.append(row | {"real": True})
            if len(batch) == self.batch_size:
                yield batch
                batch, made = [], made + 1
        if batch:
            yield batch
            made += 1
        if made > self.per_reader:
            raise RuntimeError(f"reader {reader} of rank {self.rank} made {made} batches, more than {self.per_reader}")
        if made < self.per_reader and first is None:  # an empty part: borrow the split's first record
            first = next(row for shard in range(len(self.counts)) for row in self.shards.rows(shard, 0, 1))
        for _ in range(self.per_reader - made):
            yield [first | {"real": self.pad_real}]

    def __getitem__(self, item: tuple[int, int]) -> list[dict[str, Any]]:
        epoch, b = item
        if not 0 <= b < self.num_batches:
            raise IndexError(f"batch {b} of a stream with {self.num_batches} batches")
        reader, local = b % self.readers, b // self.readers
        live_epoch, batches, next_local = self._live.get(reader, (None, None, 0))
        if batches is None or epoch != live_epoch or local < next_local:
            batches, next_local = self.batches(epoch, reader), 0
        for _ in range(local - next_local):  # skipped batches of this reader (a resumed epoch): read, not collated
            next(batches)
        self._live[reader] = (epoch, batches, local + 1)
        return next(batches)


class StreamBatchSampler(ResumableSampler, DistributedSampler):
    """Yields ``(epoch, b)`` for the ``num_batches`` batches of a :class:`RankStream`.

    It carries the epoch to the (possibly persistent) workers. It subclasses DistributedSampler so
    that Lightning neither replaces nor wraps it under DDP and calls its ``set_epoch`` every epoch. A
    resumed pass starts at the saved batch (:class:`~glmrag.datamodules.resumable.ResumableSampler`); the
    stream reads the skipped batches' records without collating them.
    """

    def __init__(self, num_batches: int, num_replicas: int = 1, rank: int = 0, seed: int = 0) -> None:
        super().__init__(range(max(num_batches, 1)), num_replicas=num_replicas, rank=rank, shuffle=False, seed=seed)
        self.num_batches = num_batches

    def __iter__(self) -> Iterator[tuple[int, int]]:
        # Lazily: the epoch is read at the first batch, after Lightning's set_epoch (a resumed fit may
        # create the iterator before it sets the restored epoch).
        for b in range(self.first_batch(), self.num_batches):
            yield self.epoch, b

    def __len__(self) -> int:
        return self.num_batches
