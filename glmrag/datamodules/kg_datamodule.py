"""What the DataModules over KG-indexed datasets share: the arguments, the indexes, the split questions.

:class:`~glmrag.datamodules.gnn_datamodule.KGQADataModule` (the GNN's whole-KG batches) and
:class:`~glmrag.datamodules.subgraph_data.SubgraphDataModule` (the GLM's subgraph records) both extend
:class:`KGDataModule`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader

from glmrag.data import registry
from glmrag.data.registry import load_dataset
from glmrag.data.types import Corpus, Question, question_fingerprint
from glmrag.datamodules.train_fraction import check_train_fraction, fraction_of
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.kg import KGIndex
from glmrag.io import plain_container


def dataset_index_config(index_cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The index config of dataset ``name``: ``extractor`` may map each training dataset to its extractor."""
    cfg = dict(index_cfg)
    if isinstance(cfg.get("extractor"), Mapping):
        if name not in cfg["extractor"]:
            raise ValueError(f"index.extractor maps {sorted(cfg['extractor'])} but not dataset {name!r}; add it")
        cfg["extractor"] = cfg["extractor"][name]
    return cfg


@dataclass
class QuestionSettings:
    """Which questions of the datasets a DataModule reads: the keyword arguments both DataModules share.

    :class:`~glmrag.datamodules.gnn_datamodule.KGQADataModule` and
    :class:`~glmrag.datamodules.subgraph_data.SubgraphDataModule` take these as keyword arguments (flat, as the
    ``configs/datamodule/*.yaml`` keys), next to their own ``datasets`` and ``index``.
    """

    root: str | None = None
    """Data folder of external datasets (None: ``$GLMRAG_DATA_DIR`` or ``../shared/data``)."""
    train_split: str | None = "train"
    """Registry split of the training questions; None skips training data."""
    val_split: str | None = "validation"
    """Registry split of the validation questions; None skips validation data."""
    test_split: str | None = "test"
    """Registry split of the test questions; None skips test data."""
    limit: int | None = None
    """Keep the first ``limit`` questions of each split of each dataset (None: all)."""
    train_fraction: float = 1.0
    """Train on this share in (0, 1] of the training questions of each dataset, drawn with ``seed`` and nested
    across fractions (GLM-RAG App. C, Fig. 7 data scaling; :func:`~glmrag.datamodules.train_fraction.fraction_of`)."""
    seed: int = 0
    """Seed of the training-question draw and of the shuffling (the order also depends on the epoch)."""
    embed_model: str = DEFAULT_MODEL
    """Sentence encoder of the question embeddings; must match the module's ``embed_model``."""

    def __post_init__(self) -> None:
        check_counts(nullable=("limit",), limit=self.limit)
        self.train_fraction = check_train_fraction(self.train_fraction)


MAY_BE_ZERO = ("num_workers",)
"""The DataModule counts that may be 0 (no DataLoader workers); every other count is at least 1."""


def check_counts(nullable: Iterable[str] = (), **counts: int | None) -> None:
    """Each ``datamodule.<name>=value`` an integer >= 1 (>= 0 for :data:`MAY_BE_ZERO`), or None for the
    ``nullable`` names (all questions, workers chosen from the cores): else a ValueError that names it."""
    for name, value in counts.items():
        low = 0 if name in MAY_BE_ZERO else 1
        if value is None and name in nullable:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            allowed = f"an integer >= {low}" + (" or null" if name in nullable else "")
            raise ValueError(f"datamodule.{name}={value!r}: must be {allowed}")


_Settings = TypeVar("_Settings")


def settings_from(cls: type[_Settings], given: Mapping[str, Any], what: str, key: str) -> _Settings:
    """``cls(**given)`` for a settings dataclass (the config node ``key``), missing fields at their defaults; keys
    that are not its fields are a TypeError that starts with ``what`` and names the fields, and so is a value that
    is not of its field's plain type (``damping: abc`` for a float; an int is a float, a bool is neither; null is
    left to the class's own checks, which run first)."""
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"{what} {unknown}: the fields of {cls.__name__} ({', '.join(known)})")
    hints = get_type_hints(cls)
    wrong = [
        f"{key}.{name}={value!r}: must be {' or '.join(t.__name__ for t in expected if t is not type(None))} "
        f"({cls.__name__}.{name})"
        for name, value in given.items()
        if value is not None and (expected := _plain_types(hints[name])) and not _is_instance(value, expected)
    ]
    try:
        settings = cls(**given)  # the class's own checks first: they say more than the type ("a number in (0, 1]")
    except TypeError:
        if wrong:  # a raw comparison of a string with a number, say
            raise TypeError(wrong[0]) from None
        raise
    if wrong:
        raise TypeError(wrong[0])
    return settings


def _plain_types(hint: Any) -> tuple[type, ...]:
    """The plain types (bool, int, float, str, None) a field's annotation allows; () when it allows others too."""
    options = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    plain = tuple(type(None) if t is None else t for t in options)
    return plain if all(t in (bool, int, float, str, type(None)) for t in plain) else ()


def _is_instance(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types) or (isinstance(value, int) and float in types)


class KGDataModule(LightningDataModule, ABC):
    """What the DataModules over KG-indexed datasets share: argument checks, the indexes, the device batch.

    A subclass takes ``datasets``, ``index`` and the :class:`QuestionSettings` as keyword arguments, calls
    :meth:`plain_arguments` on them before ``save_hyperparameters`` (so its hyper-parameters hold every
    setting flat, as the config does) and
    :meth:`set_device_batch_size` in ``setup``. A DataModule is the :class:`~glmrag.datamodules.kg_source.KGSource`
    the module is built with (``kgs=datamodule``): its steps read ``index(kg)`` and ``passage_embeddings(kg)``.
    """

    indexes: dict[str, KGIndex]

    def __init__(self) -> None:
        super().__init__()
        self.corpora: dict[str, Corpus] = {}
        """Each dataset's corpus, as its index was built from it (a subclass's ``setup`` fills it)."""
        self._passage_emb: dict[str, torch.Tensor] = {}
        self.seen_questions: set[str] = set()
        """:func:`~glmrag.data.types.question_fingerprint` of every training and validation question read."""
        self._split_texts: dict[str, dict[str, tuple[str, Question]]] = {}
        """Split name -> fingerprint -> ``(dataset, question)`` of every question read, to refuse a question
        whose text recurs in another split (:meth:`_refuse_shared_text`)."""

    @staticmethod
    def plain_arguments(
        datasets: Sequence[str] | str, index: Mapping[str, Any], questions: Mapping[str, Any]
    ) -> tuple[list[str], dict, dict[str, Any]]:
        """Distinct dataset names, the index config and the :class:`QuestionSettings` as plain containers.

        ``questions`` are the keyword arguments a subclass passed on (checked against
        :class:`QuestionSettings`, defaults filled in). Plain containers, so checkpoints holding these
        hyper-parameters load with ``weights_only=True``.
        """
        datasets = [datasets] if isinstance(datasets, str) else [str(d) for d in datasets]
        if len(set(datasets)) != len(datasets) or not datasets:
            raise ValueError(f"datasets must be distinct registry names, got {datasets}")
        settings = settings_from(QuestionSettings, questions, "unexpected DataModule argument(s)", "datamodule")
        return datasets, plain_container(index), plain_container(asdict(settings))

    def index(self, kg: str) -> KGIndex:
        """The KG index of dataset ``kg``, available after :meth:`setup`."""
        return self.indexes[kg]

    def passage_embeddings(self, kg: str) -> torch.Tensor:
        """(P, d) sentence embeddings of ``kg``'s passages in index order (on CPU), for a model with a dense
        prior term (:mod:`glmrag.nn.prior`); embedded (or read from the embeddings cache) on first use."""
        # Imported here: the embeddings cache reaches the index builder (spaCy), which a GPU machine that only
        # trains need not have (benchmarks/gpu_check.sh imports the modules without it).
        from glmrag.datamodules.gnn_input_cache import cached_passage_embeddings

        if kg not in self._passage_emb:
            self._passage_emb[kg] = cached_passage_embeddings(
                self.corpora[kg], self.indexes[kg], self.hparams.embed_model
            )
        return self._passage_emb[kg]

    def train_question_count(self) -> int:
        """How many distinct training questions this run read (after ``limit`` and ``train_fraction``)."""
        return len(self._split_texts.get("train_split", {}))

    def split_questions(self, name: str, split_name: str) -> list[Question]:
        """The questions of ``split_name`` (``train_split``, ...) of dataset ``name`` that this run reads.

        The first ``limit`` questions of the split; for training, then the ``train_fraction`` of them drawn
        by :func:`fraction_of` with the run's ``seed`` (validation and test are never subsampled).
        """
        hp = self.hparams
        questions = list(load_dataset(name, split=hp[split_name], limit=hp.limit, root=hp.root).qa)
        if split_name == "train_split":
            questions = fraction_of(questions, hp.train_fraction, hp.seed)
        texts = self._split_texts.setdefault(split_name, {})
        texts.update((question_fingerprint(q.question), (name, q)) for q in questions)
        self._refuse_shared_text(split_name)
        if split_name in ("train_split", "val_split"):
            self.seen_questions.update(texts)
        return questions

    def _refuse_shared_text(self, split_name: str) -> None:
        """Raise ``ValueError`` when a question of ``split_name`` has the text of one in another split.

        Splits are assigned by question id (:func:`~glmrag.data.registry.split_assignment`), so a file that
        repeats a question under a new id would put the same text in training and test; comparing
        fingerprints (case, punctuation and Unicode spelling ignored) refuses that before any work, across
        every dataset of the run. Two split names configured to the same split (training on the test
        questions on purpose) are not compared.
        """
        hp, texts = self.hparams, self._split_texts[split_name]
        for other, other_texts in self._split_texts.items():
            if other == split_name or hp[other] == hp[split_name]:
                continue
            shared = sorted(texts.keys() & other_texts.keys())
            if not shared:
                continue
            (name, q), (other_name, other_q) = texts[shared[0]], other_texts[shared[0]]
            files = ", ".join(registry.DATASETS[name].files)
            raise ValueError(
                f"{len(shared)} question(s) of {name}'s {hp[split_name]!r} split repeat the text of "
                f"{other_name}'s {hp[other]!r} split, e.g. {q.id!r} and {other_q.id!r}: {q.question!r} "
                f"(files: {files}); splits are assigned by id, so a question repeated under a new id crosses "
                "them. Remove the repeated questions from the questions file."
            )

    def _index_cfg(self, name: str) -> dict[str, Any]:
        return dataset_index_config(self.hparams.index, name)

    def set_device_batch_size(self) -> None:
        """Split the GLOBAL ``batch_size`` evenly over the trainer's devices (one process without one)."""
        world = self.trainer.world_size if self.trainer is not None else 1
        if self.hparams.batch_size % world:
            raise ValueError(f"batch_size {self.hparams.batch_size} is not divisible by the {world} devices")
        self.batch_size_per_device = self.hparams.batch_size // world

    @abstractmethod
    def _loader(self, split_name: str, train: bool) -> DataLoader:
        """The DataLoader of one split; each DataModule builds its own (an abstract base: only subclasses are built)."""

    def train_dataloader(self) -> DataLoader:
        return self._loader("train_split", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val_split", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test_split", train=False)
