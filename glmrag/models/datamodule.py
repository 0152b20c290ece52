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

Hand-over hook: the module reads ``trainer.datamodule.graph(kg)`` and
``trainer.datamodule.index(kg)`` in its ``setup``; both exist after this
DataModule's ``setup``.

Distributed training. ``batch_size`` is the GLOBAL batch (questions per
optimizer step; GLM-RAG Table 14: 4), split over devices as in
lightning-hydra-template. :class:`KGBatchSampler` cuts each epoch into global
batches and gives every rank its slice of each one, so a 1-device run with
batch G and a 2-device run with G/2 per device see the same questions per step.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, DistributedSampler

from glmrag.data.registry import load_dataset
from glmrag.data.types import Question
from glmrag.index.cache import get_index
from glmrag.index.embed import DEFAULT_MODEL, Embedder
from glmrag.index.kg import KGIndex
from glmrag.index.store import content_manifest
from glmrag.io import atomic_write_bytes, cache_root, plain_container
from glmrag.nn.graph_inputs import GraphInputs, graph_inputs, seed_weights

log = logging.getLogger(__name__)

TASKS = ("qa", "kgc")
INPUTS_FORMAT = 1
"""Version of the cached GNN-input files; bump it when their content changes."""


# --- GNN inputs, cached on disk next to the indexes ------------------------------------------------


def default_inputs_cache_dir() -> str:
    """``$GLMRAG_CACHE_DIR/gnn_inputs``: where the DataModule and the checkpoint retriever share GNN inputs."""
    return str(cache_root() / "gnn_inputs")


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([INPUTS_FORMAT, *parts], sort_keys=True, default=str).encode()).hexdigest()[:12]


def _load_or_compute(path: Path | None, compute) -> dict[str, Any]:
    """``compute()`` (a dict of tensors, lists, numbers), read from ``path`` when there, else written there."""
    if path is not None and path.exists():
        try:
            return torch.load(path, weights_only=True)
        except Exception as err:  # a truncated or foreign file: recompute it
            log.warning("recomputing %s: %s", path, err)
    value = compute()
    if path is not None:
        buf = io.BytesIO()
        torch.save(value, buf)
        atomic_write_bytes(path, buf.getvalue())
    return value


def cached_graph_inputs(
    index: KGIndex, embed_model: str = DEFAULT_MODEL, node_features: bool = False, cache_dir: str | None = None
) -> GraphInputs:
    """:func:`glmrag.nn.graph_inputs.graph_inputs` of ``index``, cached in ``cache_dir`` (None: no disk cache).

    Embedding the relation names is the slow part (minutes for musique100's
    5k relations on a busy CPU). The file name hashes the index manifest (which
    records what built it and when), the embedding model and ``node_features``,
    so a rebuilt index never reads stale inputs.
    """
    key = _key(content_manifest(index.manifest), embed_model, node_features)
    path = Path(cache_dir) / f"graph-{key}.pt" if cache_dir else None

    def compute() -> dict[str, Any]:
        graph = graph_inputs(index, Embedder(embed_model), node_features=node_features)
        return {f.name: getattr(graph, f.name) for f in fields(graph)}

    return GraphInputs(**_load_or_compute(path, compute))


def cached_question_embeddings(
    questions: Sequence[Question], embed_model: str = DEFAULT_MODEL, cache_dir: str | None = None
) -> dict[str, torch.Tensor]:
    """Question id -> (d,) sentence embedding of its text, cached in ``cache_dir`` (None: no disk cache)."""
    ids, texts = [q.id for q in questions], [q.question for q in questions]
    path = Path(cache_dir) / f"questions-{_key(ids, texts, embed_model)}.pt" if cache_dir else None

    def compute() -> dict[str, Any]:
        return {"ids": ids, "emb": torch.from_numpy(Embedder(embed_model).encode(texts))}

    cached = _load_or_compute(path, compute)
    return dict(zip(cached["ids"], cached["emb"], strict=True))


# --- Sampling -----------------------------------------------------------------------------------------


def dataset_index_config(index_cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The index config of dataset ``name``: ``extractor`` may map each training dataset to its extractor."""
    cfg = dict(index_cfg)
    if isinstance(cfg.get("extractor"), Mapping):
        if name not in cfg["extractor"]:
            raise ValueError(f"index.extractor maps {sorted(cfg['extractor'])} but not dataset {name!r}; add it")
        cfg["extractor"] = cfg["extractor"][name]
    return cfg


class KGBatchSampler(DistributedSampler):
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
    wraps it under DDP, and still calls ``set_epoch`` every epoch.
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
        for batch in self.global_batches():
            local = math.ceil(len(batch) / self.num_replicas)
            padded = [(batch[i % len(batch)], i >= len(batch)) for i in range(local * self.num_replicas)]
            yield padded[self.rank * local : (self.rank + 1) * local]

    def __len__(self) -> int:
        size = self.batch_size * self.num_replicas
        return sum(math.ceil(len(g) / size) for g in self.groups)


# --- Datasets and collation ------------------------------------------------------------------------


@dataclass(frozen=True)
class QARecord:
    kg: str
    question_id: str
    target: tuple[int, ...]
    """Entities of the gold supporting passages."""
    gold: tuple[str, ...]


class LocalBatches(torch.utils.data.Dataset):
    """Records fetched a local batch at a time: ``dataset[[(i, is_padding), ...]]`` -> list of pairs."""

    def __init__(self, records: Sequence[Any]) -> None:
        self.records = list(records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, batch: list[tuple[int, bool]]) -> list[tuple[Any, bool]]:
        return [(self.records[i], pad) for i, pad in batch]


class QACollate:
    """Turns a local batch of :class:`QARecord` into the batch dict of the module docstring."""

    def __init__(self, indexes: Mapping[str, KGIndex], question_emb: Mapping[str, torch.Tensor], train: bool) -> None:
        self.indexes, self.question_emb, self.train = indexes, question_emb, train

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
            "question_emb": torch.stack([self.question_emb[q] for q in qids]),  # (B, d)
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


# --- A share of the training questions (GLM-RAG Fig. 7) --------------------------------------------


def check_train_fraction(fraction: float) -> float:
    """``fraction`` as a float in (0, 1], else a ValueError that says how to fix the config."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0.0 < fraction <= 1.0:
        raise ValueError(
            f"datamodule.train_fraction (configs/datamodule/*.yaml) must be a number in (0, 1], "
            f"got {fraction!r}; e.g. 0.25 trains on a quarter of the training questions, 1.0 on all of them"
        )
    return float(fraction)


def fraction_of(questions: Sequence[Question], fraction: float, seed: int) -> list[Question]:
    """``ceil(fraction * n)`` of the ``n`` questions (at least one), chosen by ``seed``, in their original order.

    Each question gets the rank of ``sha256(f"{seed}/{id}")``; the subset is the lowest ranks. Hence the
    draw is the same in every process and Python session (DDP ranks agree without communicating), a
    smaller fraction is a subset of a larger one with the same seed (GLM-RAG Fig. 7 grows one training
    set), and a question's membership depends on its id only, not on its position in the split.
    """
    fraction = check_train_fraction(fraction)
    if fraction == 1.0 or not questions:
        return list(questions)
    keep = max(1, math.ceil(fraction * len(questions) - 1e-9))  # 0.3 * 10 is 3.0000000000000004
    rank = sorted(range(len(questions)), key=lambda i: hashlib.sha256(f"{seed}/{questions[i].id}".encode()).digest())
    chosen = set(rank[:keep])
    return [q for i, q in enumerate(questions) if i in chosen]


# --- The DataModules ---------------------------------------------------------------------------------


class KGDataModule(LightningDataModule):
    """What the DataModules over KG-indexed datasets share: argument checks, the indexes, the device batch.

    A subclass calls :meth:`plain_arguments` before ``save_hyperparameters`` and
    :meth:`set_device_batch_size` in ``setup``; the module reads ``index(kg)``.
    """

    indexes: dict[str, KGIndex]

    @staticmethod
    def plain_arguments(datasets: Sequence[str] | str, index: Mapping[str, Any]) -> tuple[list[str], dict]:
        """Distinct dataset names and the index config as plain containers.

        Plain containers, so checkpoints holding these hyper-parameters load with ``weights_only=True``.
        """
        datasets = [datasets] if isinstance(datasets, str) else [str(d) for d in datasets]
        if len(set(datasets)) != len(datasets) or not datasets:
            raise ValueError(f"datasets must be distinct registry names, got {datasets}")
        index = plain_container(index)
        return datasets, index

    def index(self, kg: str) -> KGIndex:
        """The KG index of dataset ``kg``, available after :meth:`setup`."""
        return self.indexes[kg]

    def split_questions(self, name: str, split_name: str) -> list[Question]:
        """The questions of ``split_name`` (``train_split``, ...) of dataset ``name`` that this run reads.

        The first ``limit`` questions of the split; for training, then the ``train_fraction`` of them drawn
        by :func:`fraction_of` with the run's ``seed`` (validation and test are never subsampled).
        """
        hp = self.hparams
        questions = list(load_dataset(name, split=hp[split_name], limit=hp.limit, root=hp.root).qa)
        if split_name == "train_split":
            questions = fraction_of(questions, hp.train_fraction, hp.seed)
        return questions

    def _index_cfg(self, name: str) -> dict[str, Any]:
        return dataset_index_config(self.hparams.index, name)

    def set_device_batch_size(self) -> None:
        """Split the GLOBAL ``batch_size`` evenly over the trainer's devices (one process without one)."""
        world = self.trainer.world_size if self.trainer is not None else 1
        if self.hparams.batch_size % world:
            raise ValueError(f"batch_size {self.hparams.batch_size} is not divisible by the {world} devices")
        self.batch_size_per_device = self.hparams.batch_size // world


class KGQADataModule(KGDataModule):
    """Multi-hop QA over the KG indexes of one or several datasets (see the module docstring).

    Args:
        datasets: registry names (:mod:`glmrag.data.registry`), one KG each.
        index: the index config (``configs/index/default.yaml``): cache_dir, extractor, rebuild, embed_model,
            synonym_threshold, synonym_top_k, spacy_processes. ``extractor`` may map dataset name -> extractor
            (e.g. ``{musique100: openie, toy: spacy}``) when the datasets need different ones.
        root: data folder of external datasets (None: ``$GLMRAG_DATA_DIR`` or ``../shared/data``).
        train_split, val_split, test_split: registry splits; None skips that stage's data.
        limit: keep the first ``limit`` questions of each split of each dataset (None: all).
        train_fraction: train on this share in (0, 1] of the training questions of each dataset, drawn with
            ``seed`` and nested across fractions (GLM-RAG App. C, Fig. 7 data scaling; :func:`fraction_of`).
        batch_size: GLOBAL batch size, split evenly over devices (GLM-RAG Table 14, GFM-RAG: 4).
        num_workers: DataLoader workers.
        seed: shuffling seed (the order also depends on the epoch).
        embed_model: sentence encoder of questions and relation names; must match the module's ``embed_model``.
        node_features: give the GNN the index's entity embeddings (GFM-RAG+, ``use_node_features``).
        task: ``qa`` (fine-tuning) or ``kgc`` (training batches are triples: KG-completion pretraining).
        inputs_cache_dir: where relation features and question embeddings are cached
            (None: ``$GLMRAG_CACHE_DIR/gnn_inputs``).
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
        batch_size: int = 4,
        num_workers: int = 0,
        seed: int = 0,
        embed_model: str = DEFAULT_MODEL,
        node_features: bool = False,
        task: str = "qa",
        inputs_cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        datasets, index = self.plain_arguments(datasets, index)
        train_fraction = check_train_fraction(train_fraction)
        self.save_hyperparameters(logger=False)
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
        return DataLoader(
            LocalBatches(records),
            sampler=sampler,
            batch_size=None,  # the sampler yields whole local batches
            collate_fn=collate,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train_split", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val_split", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test_split", train=False)
