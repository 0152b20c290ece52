"""Batches of one KG each, split across devices: the sampler of the GNN DataModule.

GFM-RAG trains one GNN on many KGs (Luo et al. 2025); a batch must come from a
single KG because the GNN runs over that KG's whole graph. ``batch_size`` is the
GLOBAL batch (questions per optimizer step; GLM-RAG Table 14: 4), split over
devices as in lightning-hydra-template: :class:`KGBatchSampler` cuts each epoch
into global batches and gives every rank its slice of each one, so a 1-device
run with batch G and a 2-device run with G/2 per device see the same questions
per step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import DistributedSampler

from glmrag.datamodules.resumable import ResumableSampler


class KGBatchSampler(ResumableSampler, DistributedSampler):
    """Batches of one KG each, shuffled per epoch and split across ``num_replicas`` devices.

    ``groups[k]`` lists the dataset indices of KG ``k``. Each epoch, every KG's
    indices are permuted (seeded by ``seed`` and the epoch), cut into global
    batches of ``batch_size * num_replicas``, and the global batches of all KGs
    are shuffled together. Rank ``r`` gets slice ``r`` of every global batch, so
    all ranks step through the same global batches in the same order. A short
    last global batch is padded by repeating its own items until it splits
    evenly; the sampler yields ``(index, is_padding)`` pairs so evaluation can
    ignore the repeats. Every rank yields ``len(self)`` batches.

    It subclasses :class:`~torch.utils.data.DistributedSampler` (whose
    ``set_epoch`` it inherits) because Lightning then neither replaces it nor
    wraps it under DDP, and still calls ``set_epoch`` every epoch. A resumed pass starts at the saved
    batch (:class:`~glmrag.datamodules.resumable.ResumableSampler`).
    """

    def __init__(
        self,
        groups: Sequence[Sequence[int]],
        batch_size: int,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        total = sum(len(g) for g in groups)
        super().__init__(range(max(total, 1)), num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        if batch_size < 1:
            raise ValueError(f"batch_size (per device) must be >= 1, got {batch_size}")
        self.groups = [list(g) for g in groups if len(g)]
        self.batch_size = batch_size

    def global_batches(self) -> list[list[int]]:
        """This epoch's global batches, each of one KG, in order; identical on every rank."""
        rng = np.random.default_rng([self.seed, self.epoch])
        size = self.batch_size * self.num_replicas
        batches = []
        for group in self.groups:
            order = rng.permutation(group).tolist() if self.shuffle else group
            batches += [order[i : i + size] for i in range(0, len(order), size)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[list[tuple[int, bool]]]:
        for batch in self.global_batches()[self.first_batch() :]:
            local = math.ceil(len(batch) / self.num_replicas)
            padded = [(batch[i % len(batch)], i >= len(batch)) for i in range(local * self.num_replicas)]
            yield padded[self.rank * local : (self.rank + 1) * local]

    def __len__(self) -> int:
        size = self.batch_size * self.num_replicas
        return sum(math.ceil(len(g) / size) for g in self.groups)
