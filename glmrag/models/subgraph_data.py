"""Question subgraphs for the GLM retriever, tokenised once into Parquet shards and streamed per epoch.

:class:`SubgraphDataModule` serves the batches of :class:`glmrag.models.glm_inputs.GLMCollate` (its
docstring is the batch contract). Unlike :class:`glmrag.models.gnn_datamodule.KGQADataModule`, whose GNN
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

Streaming, DDP and workers. A split is read shard by shard with pyarrow (:class:`RankStream`): each
epoch orders the shards (shuffled per epoch in training) and cuts their records into ``world_size x
readers`` contiguous parts, one per (rank, DataLoader worker), so every worker reads only the shards of
its own part, once; in training each reader also shuffles its part through a buffer of
``shuffle_buffer`` records. Every reader yields the same number of batches (topped up with one-record
batches repeating a record, ``real`` False in evaluation, True in training as DistributedSampler pads),
so every rank yields the same number of batches, or DDP would hang at the epoch's end. The record order
depends on the number of workers; the set of records of an epoch does not. The epoch reaches
persistent workers through :class:`StreamBatchSampler`, whose ``set_epoch`` Lightning calls.
``num_workers`` null picks ``min(4, cores - 1)`` (at least 1); batches are pinned when CUDA is there.

Positions. By default the collate expands each record's ``(L, L)`` positions per batch (vectorised,
:mod:`glmrag.graph.positions`). ``subgraph.precompute`` stores them in the shards instead (int16
positions and int8 kinds) so that epochs only stream and pad; benchmarks/RESULTS.md ("GLM input
pipeline") measures both.

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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, DistributedSampler

from glmrag.data.registry import load_dataset
from glmrag.data.types import Dataset, Question
from glmrag.index.cache import get_index
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.kg import KGIndex
from glmrag.index.store import content_manifest
from glmrag.io import atomic_write_bytes, atomic_write_text, cache_root, default_mode, plain_container
from glmrag.models.glm_inputs import GLMCollate, SubgraphSettings, load_tokenizer, question_record, record_schema
from glmrag.models.gnn_input_cache import cached_question_embeddings, default_inputs_cache_dir
from glmrag.models.kg_datamodule import KGDataModule, settings_from
from glmrag.progress import progress

log = logging.getLogger(__name__)

RECORDS_FORMAT = 2
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
    """``<settings.key()>-<hash>``: the hash covers the index's
    :func:`~glmrag.index.store.content_manifest`, the tokenizer's name and vocabulary size, the
    question encoder, the question ids and whether questions without target entities are dropped."""
    parts = [
        RECORDS_FORMAT,
        content_manifest(index.manifest),
        settings.key(),
        tokenizer,
        vocab_size,
        embed_model,
        list(question_ids),
    ]
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
        schema = record_schema(precomputed="relative_position" in buffer[0])
        pq.write_table(pa.Table.from_pylist(list(buffer), schema=schema), sink)
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
        files: Sequence[str],
        counts: Sequence[int],
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
        if len(files) != len(counts):
            raise ValueError(f"{len(files)} shard files but {len(counts)} shard counts")
        self.files, self.counts, self.batch_size = list(files), [int(c) for c in counts], batch_size
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
            return list(range(len(self.files)))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.files)).tolist()

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
        rows = (row for shard, a, b in self.part(epoch, reader) for row in read_rows(self.files[shard], a, b))
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
            first = next(row for shard in range(len(self.files)) for row in read_rows(self.files[shard], 0, 1))
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


def read_rows(file: str, start: int, stop: int) -> Iterator[dict[str, Any]]:
    """Rows ``start:stop`` of a Parquet shard as dicts: numeric list columns as NumPy views, the rest as Python."""
    table = pq.read_table(file)
    columns: dict[str, Any] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        kind = column.type
        if pa.types.is_list(kind) and (pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type)):
            offsets = column.offsets.to_numpy()
            values = column.values.to_numpy(zero_copy_only=False)
            columns[name] = (offsets, values)
        else:
            columns[name] = column.to_pylist()
    for i in range(start, min(stop, table.num_rows)):
        yield {
            name: value[1][value[0][i] : value[0][i + 1]] if isinstance(value, tuple) else value[i]
            for name, value in columns.items()
        }


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


def subgraph_settings(subgraph: Mapping[str, Any] | None) -> SubgraphSettings:
    """``subgraph`` (a mapping of :class:`SubgraphSettings` fields, e.g. the config's ``datamodule.subgraph``)
    as settings; missing fields take their defaults, an unknown key is an error naming the known ones."""
    return settings_from(SubgraphSettings, plain_container(subgraph or {}), "datamodule.subgraph has unknown key(s)")


class SubgraphDataModule(KGDataModule):
    """GLM inputs of one or several KG-indexed datasets, streamed from cached shards (module docstring).

    Args:
        datasets, index: as :class:`~glmrag.models.gnn_datamodule.KGQADataModule`.
        num_workers: DataLoader workers per process; None: from the cores (:attr:`num_workers`).
        batch_size: GLOBAL batch size, split evenly over devices (GLM-RAG Table 14: 2).
        tokenizer: the GLM's tokenizer: a hub name, a folder, or an ``offline:`` model; must match the module's.
        subgraph: how each question's subgraph is built: the fields of
            :class:`~glmrag.models.glm_inputs.SubgraphSettings` (``max_hops``, ``max_triplets``, ``layout``,
            ``use_text``, ``position_mode``, ``seed``, ``question_eos``, ``position_conflict``, ``precompute``)
            as a mapping, missing ones at their defaults; all but ``precompute`` must equal the model's.
        shard_size: records per Parquet shard.
        shuffle_buffer: records in the training shuffle buffer.
        cache_dir: where the shards live (None: ``$GLMRAG_CACHE_DIR/glm_subgraphs``).
        questions: the fields of :class:`~glmrag.models.kg_datamodule.QuestionSettings` (root, train_split,
            val_split, test_split, limit, train_fraction, seed, embed_model), as keyword arguments.
    """

    def __init__(
        self,
        datasets: Sequence[str] | str,
        index: Mapping[str, Any],
        batch_size: int = 2,
        num_workers: int | None = None,
        tokenizer: str = DEFAULT_MODEL,
        subgraph: Mapping[str, Any] | None = None,
        shard_size: int = 256,
        shuffle_buffer: int = 1024,
        cache_dir: str | None = None,
        **questions: Any,
    ) -> None:
        super().__init__()
        datasets, index, questions = self.plain_arguments(datasets, index, questions)
        if num_workers is not None and num_workers < 0:
            raise ValueError(f"num_workers must be >= 0 or null (chosen from the cores), got {num_workers}")
        if shard_size < 1 or shuffle_buffer < 1 or batch_size < 1:
            raise ValueError(f"batch_size={batch_size}, shard_size={shard_size}, shuffle_buffer={shuffle_buffer}: >= 1")
        self.settings = subgraph_settings(subgraph)
        subgraph = self.settings.as_dict()  # every field, plain, in the hyper-parameters
        self.save_hyperparameters(logger=False)
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

    @property
    def num_workers(self) -> int:
        """DataLoader workers per process: ``num_workers``, or when null ``min(4, cores - 1)`` and at least 1.

        Workers overlap collate (position expansion) with the training step; one core stays with the main
        process, and 4 workers per GPU process feed more than one GPU needs (benchmarks/RESULTS.md,
        "GLM input pipeline").
        """
        if self.hparams.num_workers is not None:
            return int(self.hparams.num_workers)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, min(4, cores - 1))

    def _loader(self, split_name: str, train: bool) -> DataLoader:
        if split_name not in self.splits:
            raise ValueError(f"{split_name} is None: this DataModule was configured without that split")
        parts = self.splits[split_name]
        files = [str(Path(meta["folder"]) / shard["file"]) for meta in parts for shard in meta["shards"]]
        world = self.trainer.world_size if self.trainer is not None else 1
        rank = self.trainer.global_rank if self.trainer is not None else 0
        counts = [shard["count"] for meta in parts for shard in meta["shards"]]
        workers = self.num_workers
        stream = RankStream(
            files,
            counts,
            self.batch_size_per_device,
            rank=rank,
            world_size=world,
            readers=max(1, workers),
            shuffle=train,
            seed=self.hparams.seed,
            buffer_size=self.hparams.shuffle_buffer,
            pad_real=train,
        )
        sampler = StreamBatchSampler(len(stream), num_replicas=world, rank=rank, seed=self.hparams.seed)
        if self.trainer is not None:
            # Lightning creates the loader's iterator (and workers prefetch) before it calls set_epoch; a
            # resumed fit must prefetch the restored epoch's batches, not epoch 0's.
            sampler.set_epoch(self.trainer.current_epoch)
        return DataLoader(
            stream,
            sampler=sampler,
            batch_size=None,  # the stream yields whole local batches
            collate_fn=GLMCollate(self.settings.position_mode, position_conflict=self.settings.position_conflict),
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=torch.cuda.is_available(),  # page-locked batches copy to the GPU asynchronously
        )
