"""What the DataModules over KG-indexed datasets share: the arguments, the indexes, the split questions.

:class:`~glmrag.models.gnn_datamodule.KGQADataModule` (the GNN's whole-KG batches) and
:class:`~glmrag.models.subgraph_data.SubgraphDataModule` (the GLM's subgraph records) both extend
:class:`KGDataModule`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightning import LightningDataModule

from glmrag.data.registry import load_dataset
from glmrag.data.types import Question
from glmrag.index.kg import KGIndex
from glmrag.io import plain_container
from glmrag.models.train_fraction import fraction_of


def dataset_index_config(index_cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The index config of dataset ``name``: ``extractor`` may map each training dataset to its extractor."""
    cfg = dict(index_cfg)
    if isinstance(cfg.get("extractor"), Mapping):
        if name not in cfg["extractor"]:
            raise ValueError(f"index.extractor maps {sorted(cfg['extractor'])} but not dataset {name!r}; add it")
        cfg["extractor"] = cfg["extractor"][name]
    return cfg


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
