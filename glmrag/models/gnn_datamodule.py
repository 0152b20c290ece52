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

Hand-over: this DataModule is a :class:`~glmrag.models.kg_source.GraphSource`; the module is built with
``kgs=datamodule`` and reads ``graph(kg)`` and ``index(kg)`` from it in its steps; both exist after this
DataModule's ``setup``.

Distributed training: ``batch_size`` is the GLOBAL batch, cut into per-rank slices by
:class:`~glmrag.models.kg_sampler.KGBatchSampler`. Records and collates live in
:mod:`glmrag.models.gnn_batches`, the cached GNN inputs in :mod:`glmrag.models.gnn_input_cache`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from glmrag.data.registry import load_dataset
from glmrag.index.cache import get_index
from glmrag.index.kg import KGIndex
from glmrag.models.gnn_batches import KGCCollate, LocalBatches, QACollate, QARecord, TripleRecord
from glmrag.models.gnn_input_cache import (
    cached_graph_inputs,
    cached_question_embeddings,
    default_inputs_cache_dir,
)
from glmrag.models.kg_datamodule import KGDataModule
from glmrag.models.kg_sampler import KGBatchSampler
from glmrag.models.resumable import ResumableLoader, trained_batches
from glmrag.nn.graph_inputs import GraphInputs

log = logging.getLogger(__name__)

TASKS = ("qa", "kgc")


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
        questions: the fields of :class:`~glmrag.models.kg_datamodule.QuestionSettings` (root, train_split,
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
        **questions: Any,
    ) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        datasets, index, questions = self.plain_arguments(datasets, index, questions)
        self.save_hyperparameters(logger=False)  # questions' fields flat, as in the config
        self.inputs_cache_dir = inputs_cache_dir or default_inputs_cache_dir()
        self.batch_size_per_device = batch_size
        self.indexes: dict[str, KGIndex] = {}
        self.graphs: dict[str, GraphInputs] = {}
        self.question_emb: dict[str, torch.Tensor] = {}
        self.records: dict[str, list] = {}

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
        """Build (or find) every index and its cached GNN inputs, once per node."""
        for name in self.hparams.datasets:
            self._load_kg(name)

    def setup(self, stage: str | None = None) -> None:
        """Load indexes, GNN inputs and the questions of every split; read the device count from the trainer."""
        self.set_device_batch_size()
        if self.graphs:
            return
        for name in self.hparams.datasets:
            self.indexes[name], self.graphs[name], emb = self._load_kg(name)
            self.question_emb.update(emb)
        for split_name in ("train_split", "val_split", "test_split"):
            split = self.hparams[split_name]
            if split is None:
                continue
            if split_name == "train_split" and self.hparams.task == "kgc":
                self.records[split_name] = [
                    TripleRecord(name, row)
                    for name in self.hparams.datasets
                    for row in range(len(self.index(name).triples))
                ]
            else:
                train = split_name == "train_split"
                self.records[split_name] = [
                    r for name in self.hparams.datasets for r in self._qa_records(name, split_name, train)
                ]

    def _qa_records(self, name: str, split_name: str, train: bool) -> list[QARecord]:
        """The questions of one split; training drops those without target entities (as GFM-RAG)."""
        index = self.indexes[name]
        questions = self.split_questions(name, split_name)
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
        records = self.records[split_name]
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            groups.setdefault(r.kg, []).append(i)
        sampler = KGBatchSampler(
            list(groups.values()),
            self.batch_size_per_device,
            num_replicas=self.trainer.world_size if self.trainer is not None else 1,
            rank=self.trainer.global_rank if self.trainer is not None else 0,
            shuffle=train,
            seed=self.hparams.seed,
        )
        kgc = train and self.hparams.task == "kgc"
        collate = KGCCollate(self.indexes) if kgc else QACollate(self.indexes, self.question_emb, train)
        return ResumableLoader(
            LocalBatches(records),
            sampler=sampler,
            trained=trained_batches(self.trainer) if train and self.trainer is not None else None,
            seed=self.hparams.seed,
            batch_size=None,  # the sampler yields whole local batches
            collate_fn=collate,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )
