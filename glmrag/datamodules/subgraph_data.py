"""Question subgraphs for the GLM retriever, tokenised once into LitData chunks and streamed per epoch.

:class:`SubgraphDataModule` serves the batches of :class:`~glmrag.datamodules.glm_inputs.GLMCollate` (the batch
contract). The GLM reads one budgeted subgraph per question, so a batch may mix KGs. ``prepare_data``
writes each dataset's split once as LitData chunks + ``meta.json`` into ``<cache_dir>/<key>/<dataset>/<split>``
(:func:`write_chunk_split`; ``key`` from :func:`split_key`); a folder without ``meta.json`` is rebuilt, never
read. ``setup`` loads the KG indexes (held in memory by every process) and the ``meta.json`` files;
:mod:`glmrag.datamodules.shard_stream` streams the records per rank and worker, from ``cache_dir`` or from object
storage (``records_url``; :mod:`glmrag.datamodules.chunk_records`). ``precompute`` stores the ``(L, L)``
positions in the chunks instead of expanding them per batch.
``batch_size`` is the GLOBAL batch (GLM-RAG Table 14), split evenly over devices.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from glmrag.data.registry import load_dataset
from glmrag.data.types import Dataset, Question
from glmrag.datamodules.chunk_records import (
    ChunkShards,
    check_record_store,
    open_splits,
    split_location,
    write_chunks,
)
from glmrag.datamodules.glm_inputs import GLMCollate, SubgraphSettings, load_tokenizer, question_record
from glmrag.datamodules.gnn_input_cache import cached_question_embeddings, default_inputs_cache_dir
from glmrag.datamodules.kg_datamodule import KGDataModule, check_counts, settings_from
from glmrag.datamodules.resumable import ResumableLoader, trained_batches
from glmrag.datamodules.shard_stream import RankStream, StreamBatchSampler
from glmrag.index.cache import get_index
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.kg import KGIndex
from glmrag.index.store import content_manifest
from glmrag.io import atomic_write_text, cache_root, plain_container, temporary_sibling

log = logging.getLogger(__name__)

RECORDS_FORMAT = 3
"""Version of the stored records; bump it when :func:`question_record` or how chunks are written changes."""
META = "meta.json"
SPLIT_NAMES = ("train_split", "val_split", "test_split")


# --- the stored splits ------------------------------------------------------------------------------


def split_key(
    index: KGIndex,
    settings: SubgraphSettings,
    precompute: bool,
    tokenizer: str,
    vocab_size: int,
    embed_model: str,
    question_ids: Sequence[str],
    drop_untargeted: bool,
    shard_size: int,
    write_workers: int,
) -> str:
    """``<settings.key(precompute)>-<hash>``: the hash covers the index's
    :func:`~glmrag.index.store.content_manifest`, the tokenizer's name and vocabulary size, the
    question encoder, the question ids, whether questions without target entities are dropped, and the
    records per chunk and writer processes (they cut the chunks, and the chunks the shuffled order)."""
    parts = [
        RECORDS_FORMAT,
        content_manifest(index.manifest),
        settings.key(precompute),
        tokenizer,
        vocab_size,
        embed_model,
        list(question_ids),
        drop_untargeted,
        shard_size,
        write_workers,
    ]
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    return f"{settings.key(precompute)}-{digest.hexdigest()[:12]}"


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


class RecordStats:
    """Counts over a split's records, kept in its ``meta.json`` (``stats``)."""

    def __init__(self) -> None:
        names = ("without_nodes", "without_target_nodes", "truncated", "max_tokens", "total_tokens")
        self.counts = dict.fromkeys(names, 0)

    def add(self, record: Mapping[str, Any]) -> None:
        counts = self.counts
        counts["without_nodes"] += len(record["entity_of_node"]) == 0
        counts["without_target_nodes"] += len(record["target_nodes"]) == 0
        counts["truncated"] += bool(record["truncated"])
        counts["max_tokens"] = max(counts["max_tokens"], int(record["num_tokens"]))
        counts["total_tokens"] += int(record["num_tokens"])


def write_chunk_split(
    folder: str | Path,
    make: Callable[[int], Mapping[str, Any]],
    count: int,
    chunk_size: int,
    workers: int,
    meta: dict,
    stats: bool = True,
) -> dict:
    """Write records ``make(0)``, ..., ``make(count - 1)`` as LitData chunks of ``chunk_size`` into ``folder``
    with LitData's writer in ``workers`` processes (:func:`~glmrag.datamodules.chunk_records.write_chunks`), then
    ``meta.json`` (:func:`publish_split`; ``shards`` are the chunks, ``stats`` of GLM records when ``stats``,
    none for the GNN's question records). The folder appears under its final name only complete."""
    folder, tmp = Path(folder), temporary_sibling(folder)
    try:
        chunks = write_chunks(tmp, make, count, chunk_size, workers)
        counted = RecordStats()
        if stats and chunks:
            written = ChunkShards([str(tmp)])
            for shard, chunk in enumerate(chunks):
                for record in written.rows(shard, 0, chunk["count"]):
                    counted.add(record)
        meta = meta | {"shards": chunks} | ({"stats": counted.counts} if stats else {})
        return publish_split(tmp, folder, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_split(tmp: Path, folder: Path, meta: dict) -> dict:
    """Write ``meta.json`` (``meta`` plus ``format`` and ``count``) into the written split ``tmp``, then rename
    it to ``folder``: a folder already there without a valid ``meta.json`` is replaced, a complete one
    (another process was faster) is kept. Returns the meta of ``folder``."""
    meta = meta | {"format": RECORDS_FORMAT, "count": sum(shard["count"] for shard in meta["shards"])}
    atomic_write_text(tmp / META, json.dumps(meta, indent=1, sort_keys=True))
    if folder.exists():
        if (done := read_meta(folder)) is not None:
            shutil.rmtree(tmp)
            return done
        log.warning("replacing the incomplete subgraph folder %s (no valid %s)", folder, META)
        shutil.rmtree(folder)
    os.rename(tmp, folder)
    return meta


# --- the DataModule ----------------------------------------------------------------------------------


class SubgraphDataModule(KGDataModule):
    """GLM inputs of one or several KG-indexed datasets, streamed from cached chunks (module docstring).

    Args:
        datasets, index: as :class:`~glmrag.datamodules.gnn_datamodule.KGQADataModule`.
        num_workers: DataLoader workers per process; None: from the cores (:attr:`num_workers`).
        batch_size: GLOBAL batch size, split evenly over devices (GLM-RAG Table 14: 2).
        tokenizer: the GLM's tokenizer: a hub name, a folder, or an ``offline:`` model; must match the module's.
        subgraph: how each question's subgraph is built: the model's settings (``model.subgraph``; jobs pass
            it), the fields of :class:`~glmrag.datamodules.glm_inputs.SubgraphSettings` as a mapping, missing ones
            at their defaults.
        precompute: store each record's ``(L, L)`` positions in the chunks (False: the collate computes them).
        shard_size: records per LitData chunk (part of the split's key, as ``write_workers``: they cut the chunks,
            and the chunks the shuffled order).
        shuffle_buffer: records in the training shuffle buffer.
        cache_dir: where the chunks are written (None: ``$GLMRAG_CACHE_DIR/glm_chunks``).
        records_url: read the splits from this URL (e.g. ``s3://bucket/glm_chunks``) instead of ``cache_dir``,
            whose layout (``<key>/<dataset>/<split>``) it mirrors; nothing is written then (copy a
            ``cache_dir`` there, e.g. ``aws s3 sync``; docs/clusters.md).
        storage_options: LitData's client options for ``records_url`` (for S3: boto3's, e.g. ``endpoint_url``).
        write_workers: processes of LitData's writer (each ends on a chunk of its own).
        questions: the fields of :class:`~glmrag.datamodules.kg_datamodule.QuestionSettings` (root, train_split,
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
        precompute: bool = False,
        shard_size: int = 256,
        shuffle_buffer: int = 1024,
        cache_dir: str | None = None,
        records_url: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        write_workers: int = 1,
        **questions: Any,
    ) -> None:
        super().__init__()
        datasets, index, questions = self.plain_arguments(datasets, index, questions)
        counts = {"batch_size": batch_size, "shard_size": shard_size, "shuffle_buffer": shuffle_buffer}
        check_counts(("num_workers",), **counts, num_workers=num_workers, write_workers=write_workers)
        if not isinstance(precompute, bool):
            raise ValueError(f"datamodule.precompute={precompute!r}: must be true or false")
        self.settings = settings_from(
            SubgraphSettings, plain_container(subgraph or {}), "subgraph has unknown key(s)", "model.subgraph"
        )
        subgraph = self.settings.as_dict()  # every field, plain, in the hparams
        storage_options = plain_container(storage_options or {})
        check_record_store(cache_dir, records_url, storage_options, "cache_dir")
        self.save_hyperparameters(logger=False)
        self.cache_dir = Path(cache_dir or cache_root() / "glm_chunks")
        self.batch_size_per_device = batch_size
        self.indexes: dict[str, KGIndex] = {}
        self.splits: dict[str, list[dict[str, Any]]] = {}
        """Split name -> the ``meta.json`` of each dataset's folder, with its ``folder`` added."""
        self.shards: dict[str, ChunkShards] = {}
        """Split name -> the records of all its datasets, in order."""

    # -- the cache --

    def _split_folders(self, name: str, index: KGIndex, vocab_size: int) -> Iterator[tuple[str, list[Question], Path]]:
        """``(split_name, questions, folder)`` of every configured split of dataset ``name`` (the folder in
        ``cache_dir``; :meth:`location` for where it is read from)."""
        hp = self.hparams
        for split_name in SPLIT_NAMES:
            if (split := hp[split_name]) is None:
                continue
            questions = self.split_questions(name, split_name)
            train = split_name == "train_split"
            ids = [q.id for q in questions]
            chunking = hp.shard_size, hp.write_workers
            key = split_key(
                index, self.settings, hp.precompute, hp.tokenizer, vocab_size, hp.embed_model, ids, train, *chunking
            )
            yield split_name, questions, self.cache_dir / key / name / split

    def prepare_data(self) -> None:
        """Build every index, and the chunks of every split not stored yet (once per node; with
        ``records_url``, the indexes only: the records are read from there)."""
        tokenizer = load_tokenizer(self.hparams.tokenizer)
        for name in self.hparams.datasets:
            full = load_dataset(name, root=self.hparams.root)
            index = get_index(full, self._index_cfg(name))
            for split_name, questions, folder in self._split_folders(name, index, len(tokenizer)):
                if self.hparams.records_url is None and read_meta(folder) is None:
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
        meta = {
            "dataset": name,
            "split": folder.name,
            "dropped_without_targets": len(questions) - len(kept),
            "settings": self.settings.as_dict(),
            "precompute": hp.precompute,
            "tokenizer": hp.tokenizer,
            "vocab_size": len(tokenizer),
            "embed_model": hp.embed_model,
        }
        embeddings = {q.id: embeddings[q.id] for q in kept}
        make = QuestionRecords(index, kept, name, tokenizer, self.settings, hp.precompute, embeddings)
        meta = write_chunk_split(folder, make, len(kept), hp.shard_size, hp.write_workers, meta)
        log.info(
            "%s/%s: %d subgraphs in %d chunks at %s", name, folder.name, meta["count"], len(meta["shards"]), folder
        )

    def setup(self, stage: str | None = None) -> None:
        """Load the indexes and each split's ``meta.json`` (not the records); read the device count."""
        self.set_device_batch_size()
        if self.indexes:
            return
        vocab_size = len(load_tokenizer(self.hparams.tokenizer))
        splits: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLIT_NAMES if self.hparams[s] is not None}
        for name in self.hparams.datasets:
            full = load_dataset(name, root=self.hparams.root)
            self.corpora[name] = full.corpus
            index = get_index(full, self._index_cfg(name))
            for split_name, _, folder in self._split_folders(name, index, vocab_size):
                if self.hparams.records_url is not None:
                    splits[split_name].append(
                        {"folder": split_location(folder, self.cache_dir, self.hparams.records_url)}
                    )
                elif (meta := read_meta(folder)) is None:
                    raise FileNotFoundError(
                        f"{folder / META}: no complete subgraph chunks of {name}/{folder.name} for these settings; "
                        "call prepare_data() first (Lightning does so before setup)"
                    )
                else:
                    splits[split_name].append(meta | {"folder": str(folder)})
            self.indexes[name] = index
        self.splits = splits
        options, url = self.hparams.storage_options, self.hparams.records_url
        self.shards = {
            split_name: open_splits([meta["folder"] for meta in parts], options, url, self.cache_dir)
            for split_name, parts in splits.items()
        }

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
        world = self.trainer.world_size if self.trainer is not None else 1
        rank = self.trainer.global_rank if self.trainer is not None else 0
        workers = self.num_workers
        stream = RankStream(
            self.shards[split_name],
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
        return ResumableLoader(
            stream,
            sampler=sampler,
            trained=trained_batches(self.trainer) if train and self.trainer is not None else None,
            seed=self.hparams.seed,
            batch_size=None,  # the stream yields whole local batches
            collate_fn=GLMCollate(self.settings.position_mode, position_conflict=self.settings.position_conflict),
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=torch.cuda.is_available(),  # page-locked batches copy to the GPU asynchronously
        )


class QuestionRecords:
    """``i -> question_record(...)`` of the ``i``-th of ``questions``: what LitData's writer processes run."""

    def __init__(
        self, index: KGIndex, questions: list[Question], kg: str, tokenizer, settings, precompute: bool, embeddings
    ) -> None:
        self.index, self.questions, self.kg = index, questions, kg
        self.tokenizer, self.settings, self.precompute, self.embeddings = tokenizer, settings, precompute, embeddings

    def __call__(self, i: int) -> dict[str, Any]:
        q = self.questions[i]
        emb = self.embeddings[q.id].numpy()
        return question_record(self.index, q, self.kg, self.tokenizer, self.settings, emb, self.precompute)
