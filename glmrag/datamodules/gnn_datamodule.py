"""Questions of one or several KG-indexed datasets, batched one KG at a time.

GFM-RAG trains one GNN on many KGs (Luo et al. 2025); a batch must come from a
single KG because the GNN runs over that KG's whole graph. :class:`KGQADataModule`
loads each dataset from the registry, builds (or loads) its KG index with
:func:`glmrag.index.cache.get_index` over the FULL dataset, so every split
shares it, and serves batches of one KG each:

``kg``           the dataset (KG) name
``question_ids`` B question ids
``question_emb`` (B, 384) question sentence embeddings
``seed_weight``  (B, E) :func:`glmrag.nn.graph_inputs.seed_weights` of the questions' linked entities
``target``       (B, E) float multi-hot: the entities of the gold supporting passages (GFM-RAG's targets)
``gold``         B lists of gold passage ids
``real``         (B,) bool: False for the padding that evens out the last global batch across devices

With ``task="kgc"`` the training batches are instead triples of one KG
(``kg``, ``triples`` (B, 3) long, ``real``), for GFM-RAG's KG-completion pretraining.

Hand-over: this DataModule is a :class:`~glmrag.datamodules.kg_source.GraphSource`; the module is built with
``kgs=datamodule`` and reads ``graph(kg)`` and ``index(kg)`` from it in its steps; both exist after this
DataModule's ``setup``.

Storage: by default (``store=memory``) each process builds its question records from the index in
``setup``. With ``store=litdata`` the records of every question split (with their question embeddings) are
written once as LitData chunks (:mod:`glmrag.datamodules.chunk_records`, by LitData's parallel writer) into
``$GLMRAG_CACHE_DIR/gnn_chunks`` and read row by row by each rank and DataLoader worker, from that folder or
from object storage (``records_url``). The graph of each KG and the KG-completion triples stay in memory:
they are per KG, not per question.

Distributed training: ``batch_size`` is the GLOBAL batch, cut into per-rank slices by
:class:`~glmrag.datamodules.kg_sampler.KGBatchSampler`. Records and collates live in
:mod:`glmrag.datamodules.gnn_batches`, the cached GNN inputs in :mod:`glmrag.datamodules.gnn_input_cache`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from glmrag.data.registry import load_dataset
from glmrag.data.types import Question
from glmrag.datamodules.chunk_records import check_record_store, open_splits, split_location
from glmrag.datamodules.gnn_batches import ChunkBatches, KGCCollate, LocalBatches, QACollate, QARecord, TripleRecord
from glmrag.datamodules.gnn_input_cache import (
    cached_graph_inputs,
    cached_question_embeddings,
    default_inputs_cache_dir,
)
from glmrag.datamodules.kg_datamodule import KGDataModule, check_counts
from glmrag.datamodules.kg_sampler import KGBatchSampler
from glmrag.datamodules.resumable import ResumableLoader, trained_batches
from glmrag.datamodules.subgraph_data import read_meta, write_chunk_split
from glmrag.index.cache import get_index
from glmrag.index.kg import KGIndex
from glmrag.index.store import content_manifest
from glmrag.io import cache_root, plain_container
from glmrag.nn.graph_inputs import GraphInputs

log = logging.getLogger(__name__)

TASKS = ("qa", "kgc")
STORES = ("memory", "litdata")
QUESTION_RECORDS_FORMAT = 1
"""Version of the GNN's stored question records (``store=litdata``); bump it when their content changes."""


def default_records_dir() -> str:
    """``$GLMRAG_CACHE_DIR/gnn_chunks``: the GNN's question records as LitData chunks (``store=litdata``)."""
    return str(cache_root() / "gnn_chunks")


class KGQADataModule(KGDataModule):
    """Multi-hop QA over the KG indexes of one or several datasets (see the module docstring).

    Args:
        datasets: registry names (:mod:`glmrag.data.registry`), one KG each.
        index: the index config (``configs/index/default.yaml``): cache_dir, extractor, rebuild, embed_model,
            synonym_threshold, synonym_top_k, spacy_processes. ``extractor`` may map dataset name -> extractor
            (e.g. ``{musique100: openie, toy: spacy}``) when the datasets need different ones.
        batch_size: GLOBAL batch size, split evenly over devices (GLM-RAG Table 14, GFM-RAG: 4).
        num_workers: DataLoader workers.
        node_features: give the GNN the index's entity embeddings (GFM-RAG+, ``use_node_features``).
        task: ``qa`` (fine-tuning) or ``kgc`` (training batches are triples: KG-completion pretraining).
        inputs_cache_dir: where relation features and question embeddings are cached
            (None: ``$GLMRAG_CACHE_DIR/gnn_inputs``).
        store: ``memory`` (records built in ``setup``) or ``litdata`` (written once as chunks, read from
            ``records_dir`` or ``records_url``; see the module docstring).
        records_dir: where ``store=litdata`` writes the chunks (None: :func:`default_records_dir`).
        records_url: read the chunk splits from this URL (e.g. ``s3://bucket/gnn_chunks``, a copy of
            ``records_dir``) instead; ``storage_options`` go to LitData's client (S3: ``endpoint_url``, ...).
        chunk_size: records per chunk; write_workers: processes of LitData's writer.
        questions: the fields of :class:`~glmrag.datamodules.kg_datamodule.QuestionSettings` (root, train_split,
            val_split, test_split, limit, train_fraction, seed, embed_model), as keyword arguments;
            ``embed_model`` also embeds the relation names.
    """

    def __init__(
        self,
        datasets: Sequence[str] | str,
        index: Mapping[str, Any],
        batch_size: int = 4,
        num_workers: int = 0,
        node_features: bool = False,
        task: str = "qa",
        inputs_cache_dir: str | None = None,
        store: str = "memory",
        records_dir: str | None = None,
        records_url: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        chunk_size: int = 256,
        write_workers: int = 1,
        **questions: Any,
    ) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if store not in STORES:
            raise ValueError(f"datamodule.store must be one of {STORES}, got {store!r}")
        if records_url is not None and store != "litdata":
            raise ValueError(f"datamodule.records_url={records_url!r} needs datamodule.store=litdata, not {store!r}")
        check_counts(batch_size=batch_size, num_workers=num_workers, chunk_size=chunk_size, write_workers=write_workers)
        storage_options = plain_container(storage_options or {})
        check_record_store(records_dir, records_url, storage_options, "records_dir")
        datasets, index, questions = self.plain_arguments(datasets, index, questions)
        self.save_hyperparameters(logger=False)  # questions' fields flat, as in the config
        self.inputs_cache_dir = inputs_cache_dir or default_inputs_cache_dir()
        self.records_dir = Path(records_dir or default_records_dir())
        self.batch_size_per_device = batch_size
        self.indexes: dict[str, KGIndex] = {}
        self.graphs: dict[str, GraphInputs] = {}
        self.question_emb: dict[str, torch.Tensor] = {}
        self.records: dict[str, LocalBatches | ChunkBatches] = {}
        """Split name -> its records, fetched a local batch at a time."""
        self.groups: dict[str, list[list[int]]] = {}
        """Split name -> the record positions of each KG (a batch holds one KG's questions)."""

    # -- hand-over to the module --

    def graph(self, kg: str) -> GraphInputs:
        """The GNN inputs of dataset ``kg`` (on CPU), available after :meth:`setup`."""
        return self.graphs[kg]

    # -- Lightning hooks --

    def _load_kg(self, name: str) -> tuple[KGIndex, GraphInputs, dict[str, torch.Tensor]]:
        full = load_dataset(name, root=self.hparams.root)
        self.corpora[name] = full.corpus
        index = get_index(full, self._index_cfg(name))
        model, cache = self.hparams.embed_model, self.inputs_cache_dir
        graph = cached_graph_inputs(index, model, self.hparams.node_features, cache)
        return index, graph, cached_question_embeddings(list(full.qa), model, cache)

    def prepare_data(self) -> None:
        """Build (or find) every index and its cached GNN inputs, once per node; with ``store=litdata`` (and no
        ``records_url``), also write the question records of every split not stored yet."""
        for name in self.hparams.datasets:
            index, _, emb = self._load_kg(name)
            if self.hparams.store != "litdata" or self.hparams.records_url is not None:
                continue
            for split_name in self._question_splits():
                questions = self.split_questions(name, split_name)
                if read_meta(folder := self._split_folder(name, index, split_name, questions)) is None:
                    self._write(name, index, emb, split_name, questions, folder)

    def _write(
        self,
        name: str,
        index: KGIndex,
        emb: Mapping[str, torch.Tensor],
        split_name: str,
        questions: list[Question],
        folder: Path,
    ) -> None:
        """Store the records of one split's ``questions`` (their embeddings with them) as LitData chunks."""
        hp = self.hparams
        records = self._qa_records(name, index, split_name, train=split_name == "train_split", questions=questions)
        meta = {"dataset": name, "split": hp[split_name], "embed_model": hp.embed_model}
        rows = QuestionRows(records, emb)
        meta = write_chunk_split(folder, rows, len(records), hp.chunk_size, hp.write_workers, meta, stats=False)
        log.info(
            "%s/%s: %d question records in %d chunks at %s",
            name,
            folder.name,
            meta["count"],
            len(meta["shards"]),
            folder,
        )

    def _question_splits(self) -> list[str]:
        """The configured splits of questions (not the training triples of ``task=kgc``)."""
        names = [s for s in ("train_split", "val_split", "test_split") if self.hparams[s] is not None]
        return [s for s in names if not (s == "train_split" and self.hparams.task == "kgc")]

    def _split_folder(self, name: str, index: KGIndex, split_name: str, questions: list[Question]) -> Path:
        """The folder of a question split of dataset ``name`` in ``records_dir``, keyed by the index's content,
        the question encoder, the question ids and whether questions without targets are dropped (training)."""
        ids = [q.id for q in questions]
        parts = [QUESTION_RECORDS_FORMAT, content_manifest(index.manifest), self.hparams.embed_model, ids]
        digest = hashlib.sha256(json.dumps([*parts, split_name == "train_split"], default=str).encode())
        return self.records_dir / digest.hexdigest()[:16] / name / self.hparams[split_name]

    def setup(self, stage: str | None = None) -> None:
        """Load indexes, GNN inputs and the questions of every split; read the device count from the trainer."""
        self.set_device_batch_size()
        if self.graphs:
            return
        chunks = self.hparams.store == "litdata"
        for name in self.hparams.datasets:
            self.indexes[name], self.graphs[name], emb = self._load_kg(name)
            if not chunks:
                self.question_emb.update(emb)
        if self.hparams.task == "kgc" and self.hparams.train_split is not None:
            triples = [
                TripleRecord(name, row)
                for name in self.hparams.datasets
                for row in range(len(self.index(name).triples))
            ]
            self._set_records("train_split", LocalBatches(triples), [r.kg for r in triples])
        for split_name in self._question_splits():
            if chunks:
                self._set_chunk_records(split_name)
            else:
                train = split_name == "train_split"
                records = [
                    r
                    for name in self.hparams.datasets
                    for r in self._qa_records(name, self.indexes[name], split_name, train)
                ]
                self._set_records(split_name, LocalBatches(records), [r.kg for r in records])

    def _set_records(self, split_name: str, records: LocalBatches | ChunkBatches, kgs: Sequence[str]) -> None:
        self.records[split_name] = records
        groups: dict[str, list[int]] = {}
        for i, kg in enumerate(kgs):
            groups.setdefault(kg, []).append(i)
        self.groups[split_name] = list(groups.values())

    def _set_chunk_records(self, split_name: str) -> None:
        """The split's records from its chunk folders (or URLs), one per dataset, in dataset order."""
        locations = []
        for name in self.hparams.datasets:
            folder = self._split_folder(name, self.indexes[name], split_name, self.split_questions(name, split_name))
            if self.hparams.records_url is None and read_meta(folder) is None:
                raise FileNotFoundError(
                    f"{folder}: no complete question records of {name}/{folder.name} for these settings; call "
                    "prepare_data() first (Lightning does so before setup)"
                )
            locations.append(split_location(folder, self.records_dir, self.hparams.records_url))
        shards = open_splits(locations, self.hparams.storage_options, self.hparams.records_url, self.records_dir)
        counts = shards.location_counts()
        kgs = [name for name, count in zip(self.hparams.datasets, counts, strict=True) for _ in range(count)]
        self._set_records(split_name, ChunkBatches(shards), kgs)

    def _qa_records(
        self, name: str, index: KGIndex, split_name: str, train: bool, questions: list[Question] | None = None
    ) -> list[QARecord]:
        """The records of one split's questions (``questions``: read from the registry when None); training drops
        those without target entities (as GFM-RAG)."""
        questions = self.split_questions(name, split_name) if questions is None else questions
        records = [
            QARecord(name, q.id, tuple(index.entities_of_passages(list(q.supporting))), q.supporting) for q in questions
        ]
        if train:
            kept = [r for r in records if r.target]
            if len(kept) < len(records):
                dropped = len(records) - len(kept)
                log.info("%s/%s: %d questions without target entities dropped", name, self.hparams[split_name], dropped)
            records = kept
        return records

    def _loader(self, split_name: str, train: bool) -> DataLoader:
        if split_name not in self.records:
            raise ValueError(f"{split_name} is None: this DataModule was configured without that split")
        sampler = KGBatchSampler(
            self.groups[split_name],
            self.batch_size_per_device,
            num_replicas=self.trainer.world_size if self.trainer is not None else 1,
            rank=self.trainer.global_rank if self.trainer is not None else 0,
            shuffle=train,
            seed=self.hparams.seed,
        )
        kgc = train and self.hparams.task == "kgc"
        collate = KGCCollate(self.indexes) if kgc else QACollate(self.indexes, self.question_emb, train)
        return ResumableLoader(
            self.records[split_name],
            sampler=sampler,
            trained=trained_batches(self.trainer) if train and self.trainer is not None else None,
            seed=self.hparams.seed,
            batch_size=None,  # the sampler yields whole local batches
            collate_fn=collate,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )


class QuestionRows:
    """``i -> records[i].row(emb)``: the question records as LitData's writer processes store them."""

    def __init__(self, records: Sequence[QARecord], question_emb: Mapping[str, torch.Tensor]) -> None:
        self.records, self.question_emb = list(records), question_emb

    def __call__(self, i: int) -> dict[str, Any]:
        record = self.records[i]
        return record.row(self.question_emb[record.question_id])
