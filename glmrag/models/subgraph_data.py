"""Question subgraphs for the GLM retriever, tokenised once into Parquet shards and streamed per epoch.

:class:`SubgraphDataModule` serves the batches of :class:`glmrag.models.glm_inputs.GLMCollate` (its
docstring is the batch contract). Unlike :class:`glmrag.models.datamodule.KGQADataModule`, whose GNN
reads a whole KG, the GLM reads one budgeted subgraph per question, so a batch may mix KGs (``kg`` is
per row) and the records are precomputed:

``prepare_data`` selects and tokenises every question's subgraph once
(:func:`~glmrag.models.glm_inputs.question_record`) and writes, per dataset and split, a folder::

    <cache_dir>/<key>/<dataset>/<split>/shard-00000.parquet ... meta.json

``key`` hashes everything a record depends on (:func:`split_key`). Shards are written as records
arrive (``shard_size`` at a time), into a temporary sibling folder whose ``meta.json`` is written last
and which is renamed into place, so a folder under the final name is complete; one without
``meta.json`` (or with a missing shard) is rebuilt, never read.

``setup`` loads the KG indexes (the module ranks passages with ``index(kg)``) and each split's
``meta.json``; it never materialises the records. Limitation: the indexes themselves are held in
memory by every process, so a KG too large for one process's memory cannot be evaluated here, even
though its records stream.

Streaming and DDP. A split is read with ``datasets.load_dataset("parquet", ..., streaming=True)``,
shuffled for training with a buffer of ``shuffle_buffer`` records and the shard order, both reseeded
per epoch, and split across ranks by ``datasets.distributed.split_dataset_by_node`` with the
``examples`` strategy (every rank reads the same shuffled stream and keeps every ``world_size``-th
record), so the ranks partition the split exactly. Every rank then yields ``ceil(count / world_size)``
records (the rank left short repeats one record, ``real`` False in evaluation, True in training as
DistributedSampler pads) and so the same number of batches, or DDP would hang at the epoch's end.

Workers. DataLoader workers split a rank's stream by batch, not by shard: worker ``w`` collates
batches ``w, w + num_workers, ...`` of the rank's stream (the collate, which expands the ``(L, L)``
positions, is the costly part) and skips the others' records. Shard-level worker splitting would make
a rank's batch count depend on how shards fall to workers, which differs between ranks. The epoch
reaches persistent workers through :class:`StreamBatchSampler`, whose ``set_epoch`` Lightning calls.

``batch_size`` is the GLOBAL batch (GLM-RAG Table 14: 2), split evenly over devices.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets as hf_datasets
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from datasets.distributed import split_dataset_by_node
from torch.utils.data import DataLoader, DistributedSampler

from glmrag.data.registry import load_dataset
from glmrag.data.types import Dataset, Question
from glmrag.graph.subgraph import MAX_HOPS, MAX_TRIPLETS
from glmrag.index.cache import get_index
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.kg import KGIndex
from glmrag.io import atomic_write_bytes, atomic_write_text, cache_root, default_mode
from glmrag.models.datamodule import (
    KGDataModule,
    cached_question_embeddings,
    check_train_fraction,
    default_inputs_cache_dir,
)
from glmrag.models.glm_inputs import RECORD_SCHEMA, GLMCollate, SubgraphSettings, load_tokenizer, question_record
from glmrag.progress import progress

log = logging.getLogger(__name__)

RECORDS_FORMAT = 1
"""Version of the stored records; bump it when :func:`question_record` or the schema changes."""
META = "meta.json"
SPLIT_NAMES = ("train_split", "val_split", "test_split")


def default_cache_dir() -> str:
    """``$GLMRAG_CACHE_DIR/glm_subgraphs``."""
    return str(cache_root() / "glm_subgraphs")


# --- the stored splits ------------------------------------------------------------------------------


def split_key(
    index: KGIndex,
    settings: SubgraphSettings,
    tokenizer: str,
    vocab_size: int,
    embed_model: str,
    question_ids: Sequence[str],
    drop_untargeted: bool,
) -> str:
    """``<settings.key()>-<hash>``: the hash covers the index manifest (minus file checksums, which only a
    saved index carries), the tokenizer's name and vocabulary size, the question encoder, the question
    ids and whether questions without target entities are dropped."""
    manifest = {k: v for k, v in index.manifest.items() if k != "files"}
    parts = [RECORDS_FORMAT, manifest, settings.key(), tokenizer, vocab_size, embed_model, list(question_ids)]
    digest = hashlib.sha256(json.dumps([*parts, drop_untargeted], sort_keys=True, default=str).encode())
    return f"{settings.key()}-{digest.hexdigest()[:12]}"


def read_meta(folder: str | Path) -> dict[str, Any] | None:
    """The ``meta.json`` of a complete split folder, or None (missing, unreadable, old format, lost shard)."""
    path = Path(folder) / META
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != RECORDS_FORMAT:
        return None
    if not all((Path(folder) / shard["file"]).is_file() for shard in meta.get("shards", [])):
        return None
    return meta


def write_split(folder: str | Path, records: Iterable[Mapping[str, Any]], shard_size: int, meta: dict) -> dict:
    """Write ``records`` as Parquet shards of ``shard_size`` and then ``meta.json`` into ``folder``.

    Records are consumed as a stream: at most one shard is held in memory. The folder appears under its
    final name only complete (temporary sibling, renamed); a folder already there without a valid
    ``meta.json`` is replaced, a complete one (another process was faster) is kept. Returns the meta:
    ``meta`` plus ``format``, ``count``, ``shards`` (``file``, ``count``) and ``stats``.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    os.chmod(tmp, default_mode(directory=True))
    shards: list[dict[str, Any]] = []
    buffer: list[Mapping[str, Any]] = []
    stats = {"without_nodes": 0, "without_target_nodes": 0, "truncated": 0, "max_tokens": 0, "total_tokens": 0}

    def flush() -> None:
        name = f"shard-{len(shards):05d}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(list(buffer), schema=RECORD_SCHEMA), sink)
        atomic_write_bytes(tmp / name, sink.getvalue().to_pybytes())
        shards.append({"file": name, "count": len(buffer)})
        buffer.clear()

    try:
        for record in progress(records, f"subgraph shards ({Path(folder).name})", unit="question"):
            buffer.append(record)
            stats["without_nodes"] += len(record["entity_of_node"]) == 0
            stats["without_target_nodes"] += len(record["target_nodes"]) == 0
            stats["truncated"] += bool(record["truncated"])
            stats["max_tokens"] = max(stats["max_tokens"], int(record["num_tokens"]))
            stats["total_tokens"] += int(record["num_tokens"])
            if len(buffer) == shard_size:
                flush()
        if buffer:
            flush()
        count = sum(shard["count"] for shard in shards)
        meta = meta | {"format": RECORDS_FORMAT, "count": count, "shards": shards, "stats": stats}
        atomic_write_text(tmp / META, json.dumps(meta, indent=1, sort_keys=True))
        if folder.exists():
            if (done := read_meta(folder)) is not None:
                shutil.rmtree(tmp)
                return done
            log.warning("replacing the incomplete subgraph folder %s (no valid %s)", folder, META)
            shutil.rmtree(folder)
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


# --- streaming ---------------------------------------------------------------------------------------


class RankStream(torch.utils.data.Dataset):
    """The batches of one rank over Parquet shards: ``stream[(epoch, b)]`` -> list of records (batch ``b``).

    The rank's records are those of :func:`split_dataset_by_node` (``examples`` strategy) on the stream of
    all shards, shuffled per epoch when ``shuffle``; the rank yields exactly ``ceil(count / world_size)``
    records, topping up with a repeat whose ``real`` is ``pad_real``. Requests are served from a live
    iterator, so consecutive batches cost one pass; a request for an earlier batch or another epoch
    restarts the pass.
    """

    def __init__(
        self,
        files: Sequence[str],
        count: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        buffer_size: int = 1024,
        pad_real: bool = False,
    ) -> None:
        if batch_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need batch_size >= 1 and 0 <= rank < world_size, got {batch_size}, {rank}, {world_size}")
        self.files, self.count, self.batch_size = list(files), count, batch_size
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.buffer_size, self.pad_real = shuffle, seed, buffer_size, pad_real
        self.per_rank = math.ceil(count / world_size)
        self.num_batches = math.ceil(self.per_rank / batch_size)
        self._epoch: int | None = None
        self._batches: Iterator[list[dict[str, Any]]] | None = None
        self._next = 0

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_epoch": None, "_batches": None, "_next": 0}  # generators do not pickle

    def __len__(self) -> int:
        return self.num_batches

    def _rows(self, epoch: int, split: bool) -> Iterator[dict[str, Any]]:
        ds = hf_datasets.load_dataset("parquet", data_files=self.files, split="train", streaming=True)
        if self.shuffle:
            # One input shard at a time: the interleaving reader of several shards sleeps 5 s at the end of
            # every pass (datasets' Parquet workaround for apache/arrow#45214); the buffer spans shards anyway.
            ds = ds.shuffle(seed=self.seed, buffer_size=self.buffer_size, max_buffer_input_shards=1)
            ds.set_epoch(epoch)
        if split and self.world_size > 1:
            ds = split_dataset_by_node(ds, rank=self.rank, world_size=self.world_size, strategy="examples")
        # .iter() rather than iter(ds): inside a DataLoader worker, iter(ds) would split the shards by worker.
        for columns in ds.iter(batch_size=64):
            names = list(columns)
            for i in range(len(columns[names[0]])):
                yield {name: columns[name][i] for name in names}

    def records(self, epoch: int) -> Iterator[dict[str, Any]]:
        """This rank's ``per_rank`` records of ``epoch``, in stream order, each with ``real``."""
        seen = 0
        first = None
        for row in self._rows(epoch, split=True):
            first = row if first is None else first
            seen += 1
            yield row | {"real": True}
        if seen > self.per_rank:
            raise RuntimeError(f"rank {self.rank} read {seen} records, more than its {self.per_rank}; shards changed?")
        if seen < self.per_rank and first is None:  # fewer records than ranks: borrow the split's first one
            first = next(self._rows(epoch, split=False))
        for _ in range(self.per_rank - seen):
            yield first | {"real": self.pad_real}

    def batches(self, epoch: int) -> Iterator[list[dict[str, Any]]]:
        batch: list[dict[str, Any]] = []
        for record in self.records(epoch):
            batch.append(record)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def __getitem__(self, item: tuple[int, int]) -> list[dict[str, Any]]:
        epoch, b = item
        if not 0 <= b < self.num_batches:
            raise IndexError(f"batch {b} of a stream with {self.num_batches} batches")
        if self._batches is None or epoch != self._epoch or b < self._next:
            self._epoch, self._batches, self._next = epoch, self.batches(epoch), 0
        for _ in range(b - self._next):  # another worker's batches: read, not collated
            next(self._batches)
        self._next = b + 1
        return next(self._batches)


class StreamBatchSampler(DistributedSampler):
    """Yields ``(epoch, b)`` for the ``num_batches`` batches of a :class:`RankStream`.

    It carries the epoch to the (possibly persistent) workers. It subclasses DistributedSampler so
    that Lightning neither replaces nor wraps it under DDP and calls its ``set_epoch`` every epoch.
    """

    def __init__(self, num_batches: int, num_replicas: int = 1, rank: int = 0, seed: int = 0) -> None:
        super().__init__(range(max(num_batches, 1)), num_replicas=num_replicas, rank=rank, shuffle=False, seed=seed)
        self.num_batches = num_batches

    def __iter__(self) -> Iterator[tuple[int, int]]:
        # Lazily: the epoch is read at the first batch, after Lightning's set_epoch (a resumed fit may
        # create the iterator before it sets the restored epoch).
        for b in range(self.num_batches):
            yield self.epoch, b

    def __len__(self) -> int:
        return self.num_batches


# --- the DataModule ----------------------------------------------------------------------------------


class SubgraphDataModule(KGDataModule):
    """GLM inputs of one or several KG-indexed datasets, streamed from cached shards (module docstring).

    Args:
        datasets, index, root, train_split, val_split, test_split, limit, train_fraction, num_workers, seed,
            embed_model:
            as :class:`~glmrag.models.datamodule.KGQADataModule`.
        batch_size: GLOBAL batch size, split evenly over devices (GLM-RAG Table 14: 2).
        tokenizer: the GLM's tokenizer: a hub name, a folder, or an ``offline:`` model; must match the module's.
        max_hops, max_triplets, layout, use_text, position_mode: :class:`~glmrag.models.glm_inputs.SubgraphSettings`.
        subgraph_seed: seed of the randomized BFS (:attr:`SubgraphSettings.seed`).
        shard_size: records per Parquet shard.
        shuffle_buffer: records in the training shuffle buffer.
        cache_dir: where the shards live (None: ``$GLMRAG_CACHE_DIR/glm_subgraphs``).
    """

    def __init__(
        self,
        datasets: Sequence[str] | str,
        index: Mapping[str, Any],
        root: str | None = None,
        train_split: str | None = "train",
        val_split: str | None = "validation",
        test_split: str | None = "test",
        limit: int | None = None,
        train_fraction: float = 1.0,
        batch_size: int = 2,
        num_workers: int = 0,
        seed: int = 0,
        embed_model: str = DEFAULT_MODEL,
        tokenizer: str = DEFAULT_MODEL,
        max_hops: int = MAX_HOPS,
        max_triplets: int = MAX_TRIPLETS,
        layout: str = "graph",
        use_text: bool = True,
        position_mode: str = "triple",
        subgraph_seed: int = 0,
        shard_size: int = 256,
        shuffle_buffer: int = 1024,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        datasets, index = self.plain_arguments(datasets, index)
        train_fraction = check_train_fraction(train_fraction)
        if shard_size < 1 or shuffle_buffer < 1 or batch_size < 1:
            raise ValueError(f"batch_size={batch_size}, shard_size={shard_size}, shuffle_buffer={shuffle_buffer}: >= 1")
        self.save_hyperparameters(logger=False)
        self.settings = SubgraphSettings(max_hops, max_triplets, layout, use_text, position_mode, subgraph_seed)
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self.batch_size_per_device = batch_size
        self.indexes: dict[str, KGIndex] = {}
        self.splits: dict[str, list[dict[str, Any]]] = {}
        """Split name -> the ``meta.json`` of each dataset's folder, with its ``folder`` added."""

    # -- the cache --

    def _split_folders(self, name: str, index: KGIndex, vocab_size: int) -> Iterator[tuple[str, list[Question], Path]]:
        """``(split_name, questions, folder)`` of every configured split of dataset ``name``."""
        hp = self.hparams
        for split_name in SPLIT_NAMES:
            if (split := hp[split_name]) is None:
                continue
            questions = self.split_questions(name, split_name)
            train = split_name == "train_split"
            ids = [q.id for q in questions]
            key = split_key(index, self.settings, hp.tokenizer, vocab_size, hp.embed_model, ids, drop_untargeted=train)
            yield split_name, questions, self.cache_dir / key / name / split

    def prepare_data(self) -> None:
        """Build every index, and the shards of every split not stored yet (once per node)."""
        tokenizer = load_tokenizer(self.hparams.tokenizer)
        for name in self.hparams.datasets:
            full = load_dataset(name, root=self.hparams.root)
            index = get_index(full, self._index_cfg(name))
            for split_name, questions, folder in self._split_folders(name, index, len(tokenizer)):
                if read_meta(folder) is None:
                    self._write(full, index, tokenizer, questions, folder, train=split_name == "train_split")

    def _write(
        self, full: Dataset, index: KGIndex, tokenizer, questions: list[Question], folder: Path, train: bool
    ) -> None:
        """Select, tokenise and store the subgraphs of ``questions``; training drops those without targets."""
        hp, name = self.hparams, full.name
        embeddings = cached_question_embeddings(list(full.qa), hp.embed_model, default_inputs_cache_dir())
        kept = [q for q in questions if not train or index.entities_of_passages(list(q.supporting))]
        if len(kept) < len(questions):
            log.info(
                "%s/%s: %d questions without target entities dropped", name, folder.name, len(questions) - len(kept)
            )
        records = (question_record(index, q, name, tokenizer, self.settings, embeddings[q.id].numpy()) for q in kept)
        meta = {
            "dataset": name,
            "split": folder.name,
            "dropped_without_targets": len(questions) - len(kept),
            "settings": self.settings.as_dict(),
            "tokenizer": hp.tokenizer,
            "vocab_size": len(tokenizer),
            "embed_model": hp.embed_model,
        }
        meta = write_split(folder, records, hp.shard_size, meta)
        log.info(
            "%s/%s: %d subgraphs in %d shards at %s", name, folder.name, meta["count"], len(meta["shards"]), folder
        )

    def setup(self, stage: str | None = None) -> None:
        """Load the indexes and each split's ``meta.json`` (not the records); read the device count."""
        self.set_device_batch_size()
        if self.indexes:
            return
        vocab_size = len(load_tokenizer(self.hparams.tokenizer))
        splits: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLIT_NAMES if self.hparams[s] is not None}
        for name in self.hparams.datasets:
            index = get_index(load_dataset(name, root=self.hparams.root), self._index_cfg(name))
            for split_name, _, folder in self._split_folders(name, index, vocab_size):
                if (meta := read_meta(folder)) is None:
                    raise FileNotFoundError(
                        f"{folder / META}: no complete subgraph shards of {name}/{folder.name} for these settings; "
                        "call prepare_data() first (Lightning does so before setup)"
                    )
                splits[split_name].append(meta | {"folder": str(folder)})
            self.indexes[name] = index
        self.splits = splits

    # -- loaders --

    def _loader(self, split_name: str, train: bool) -> DataLoader:
        if split_name not in self.splits:
            raise ValueError(f"{split_name} is None: this DataModule was configured without that split")
        parts = self.splits[split_name]
        files = [str(Path(meta["folder"]) / shard["file"]) for meta in parts for shard in meta["shards"]]
        world = self.trainer.world_size if self.trainer is not None else 1
        rank = self.trainer.global_rank if self.trainer is not None else 0
        stream = RankStream(
            files,
            sum(meta["count"] for meta in parts),
            self.batch_size_per_device,
            rank=rank,
            world_size=world,
            shuffle=train,
            seed=self.hparams.seed,
            buffer_size=self.hparams.shuffle_buffer,
            pad_real=train,
        )
        return DataLoader(
            stream,
            sampler=StreamBatchSampler(len(stream), num_replicas=world, rank=rank, seed=self.hparams.seed),
            batch_size=None,  # the stream yields whole local batches
            collate_fn=GLMCollate(self.hparams.position_mode),
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train_split", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val_split", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test_split", train=False)
