"""What every trained retriever's LightningModule shares: evaluation by the evaluator's metrics, logging,
the best-epoch tracker and the optimizer.

A subclass supplies ``model_step(batch) -> (loss, logits)``, ``score(batch, logits)`` (the entity scores of
each row, and the passage scores where the module scores passages itself) and ``question_batch`` (a batch of
questions as its DataModule serves it). :meth:`RetrieverModule.rank` turns scores into a
:class:`~glmrag.index.ranking.Ranking` per row with the document ranker of ``evaluation``: the one ranking of a
trained model. Validation and test score its lists of ``max(ks)`` passages with
:func:`glmrag.index.ranking_metrics.retrieval_metrics` (rows that are padding or have no gold passage are left
out, as the evaluator does), and the checkpoint retriever (:mod:`glmrag.retrievers.checkpoint`) calls it on
the evaluator's questions, so ``val/recall@2`` is the number the evaluator reports for the module on the same
questions. A checkpoint records the class that saved it (:data:`MODULE_CLASS_KEY`, :func:`saved_module_class`).

Log keys (lightning-hydra-template): ``train/loss``; ``val/loss``, ``val/recall@k``, ``val/mrr`` and
``val/recall@2_best``; ``test/...`` likewise. The settings both modules share (:class:`LossWeights`,
:class:`Evaluation`) and the one conversion of a config node into a settings dataclass
(:func:`typed_settings`) live here too.
"""

from __future__ import annotations

import copy
import importlib
import logging
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from lightning import LightningModule
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn
from torchmetrics import MaxMetric, MeanMetric, Metric

from glmrag.data.types import FINGERPRINT_VERSION, Question
from glmrag.datamodules.kg_datamodule import settings_from
from glmrag.datamodules.kg_source import KGSource
from glmrag.datamodules.resumable import (
    RANDOM_STREAMS_KEY,
    load_pending_loader_state,
    random_streams,
    restore_random_streams,
)
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import DOC_RANKER_ENTITIES, RANKERS, Ranking, make_rankings, rank_passages, top_k_stable
from glmrag.index.ranking_metrics import retrieval_metrics
from glmrag.io import plain_container
from glmrag.models.checkpointing import (
    HPARAMS_LAYOUT,
    HPARAMS_LAYOUT_KEY,
    SEEN_QUESTIONS_KEY,
    SEEN_VERSION_KEY,
    CheckpointLayoutError,
    CheckpointMismatchError,
    check_layout,
)
from glmrag.nn.prior import PriorSettings

log = logging.getLogger(__name__)

BEST_METRIC = "recall@2"
"""The headline metric (GLM-RAG §5) whose best value is logged as ``val/recall@2_best``."""
MODULE_CLASS_KEY = "glmrag_module_class"
"""Checkpoint entry: the import path of the :class:`RetrieverModule` subclass that saved it
(``glmrag.models.gnn_module.GNNRetrieverModule``), the class that loads it back (:func:`saved_module_class`)."""

Optimizer = Callable[..., torch.optim.Optimizer]
_Settings = TypeVar("_Settings")


def typed_settings(cls: type[_Settings], value: Any, key: str) -> _Settings:
    """``value`` as a ``cls`` settings dataclass: an instance as it is, None as ``cls()``, a mapping (a config
    node such as ``model.gnn``) or another settings instance (a :class:`LossWeights` for the GLM's
    :class:`~glmrag.models.glm_module.GLMLossWeights`) by its fields, missing ones at ``cls``'s defaults; a key
    that is not a field of ``cls`` is a TypeError naming ``key`` and the fields."""
    if isinstance(value, cls):
        return value
    if value is None:
        return cls()
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if not isinstance(value, Mapping):
        raise TypeError(f"{key} must be a mapping of the fields of {cls.__name__}, got {value!r}")
    return settings_from(cls, plain_container(value), f"{key} has unknown key(s)", key)


def prior_settings(value: PriorSettings | Mapping[str, Any] | None) -> PriorSettings | None:
    """``model.prior``: None (the papers' models) or :class:`~glmrag.nn.prior.PriorSettings`."""
    return None if value is None else typed_settings(PriorSettings, value, "model.prior")


@dataclass
class LossWeights:
    """GFM-RAG's loss, :func:`~glmrag.models.losses.gfm_rag_loss`: ``bce_weight`` x weighted BCE +
    ``listce_weight`` x ListCE. Defaults GFM-RAG's (GLM-RAG Table 14, alpha = 0.3); the GLM's are
    :class:`~glmrag.models.glm_module.GLMLossWeights`."""

    bce_weight: float = 0.3
    """Weight of the weighted BCE (GLM-RAG Table 14: 0.3 for GFM-RAG; App. B: 0.44 for the GLM)."""
    listce_weight: float = 0.7
    """Weight of the ListCE (GLM-RAG Table 14: 0.7 for GFM-RAG; App. B: 0.56 for the GLM)."""
    temperature: float = 0.2
    """Temperature of the BCE's adversarial negative weights (GFM-RAG ``stage2_qa_finetune.yaml``: 0.2)."""
    passage_weight: float = 0.0
    """Weight of the passage ListCE, :func:`~glmrag.models.losses.passage_list_ce` (glmrag's, not in the papers:
    0 in every paper config; GNN only)."""

    def __post_init__(self) -> None:
        names = ("bce_weight", "listce_weight", "passage_weight")
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"model.loss.{name}={value!r}: must be a finite number >= 0")
        if self.bce_weight + self.listce_weight + self.passage_weight == 0:
            raise ValueError(
                "model.loss.bce_weight, listce_weight and passage_weight are all 0: nothing would be trained; set "
                "one above 0"
            )
        if not self.temperature > 0:
            raise ValueError(f"loss.temperature must be > 0, got {self.temperature!r}")

    @property
    def entity_loss(self) -> dict[str, float]:
        """The keyword arguments of :func:`~glmrag.models.losses.gfm_rag_loss`: the entity losses' weights."""
        return {"bce_weight": self.bce_weight, "listce_weight": self.listce_weight, "temperature": self.temperature}


@dataclass
class Evaluation:
    """How validation and test rank and score passages (the evaluator's ranker and metrics)."""

    ks: tuple[int, ...] = (1, 2, 5, 10)
    """Cut-offs of the logged ``recall@k``; must include 2 (``val/recall@2_best``). Stored sorted, as a tuple."""
    ranker: str = "idf_topk"
    """Document ranker over the entity scores (:data:`~glmrag.index.ranking.RANKERS`; GFM-RAG ``idf_topk``)."""
    top_entities: int = DOC_RANKER_ENTITIES
    """Entities the document ranker reads (GLM-RAG Table 14: 20)."""

    def __post_init__(self) -> None:
        if self.ranker not in RANKERS:
            raise ValueError(f"evaluation.ranker must be one of {RANKERS}, got {self.ranker!r}")
        if any(isinstance(k, bool) or int(k) != k or k < 1 for k in self.ks):
            raise ValueError(f"evaluation.ks must be integers >= 1, got {list(self.ks)}")
        ks = tuple(sorted({int(k) for k in self.ks}))  # a plain tuple (not a Hydra ListConfig) in the checkpoint
        if 2 not in ks:
            raise ValueError(f"evaluation.ks must include 2 (val/{BEST_METRIC}_best is tracked), got {ks}")
        self.ks = ks
        if isinstance(self.top_entities, bool) or not isinstance(self.top_entities, int) or self.top_entities < 1:
            raise ValueError(f"model.evaluation.top_entities={self.top_entities!r}: must be an integer >= 1")


@dataclass
class Scores:
    """What :meth:`RetrieverModule.score` gives for some rows of a batch, all of one KG."""

    index: KGIndex
    """The KG's index."""
    rows: list[int]
    """The batch rows scored, in the order of the score rows."""
    entities: np.ndarray
    """``(b, E)`` entity scores; ``-inf`` for an entity the module does not score."""
    passages: np.ndarray | None = None
    """``(b, P)`` passage scores that rank the passages (a prior's fused passage logits, :mod:`glmrag.nn.prior`);
    None: the evaluation's document ranker over :attr:`entities`."""


class RetrieverModule(LightningModule, ABC):
    """Base class of the retriever modules; call :meth:`init_evaluation` in ``__init__``.

    A subclass takes ``kgs``, the :class:`~glmrag.datamodules.kg_source.KGSource` its steps read KGs from (not a
    hyper-parameter), and keeps it in :attr:`kgs`; everything else a step needs is in its batch.
    """

    optimizer_factory: Optimizer
    scheduler_factory: Callable[[torch.optim.Optimizer], Any] | None
    evaluation: Evaluation
    kgs: KGSource | None = None
    """Where the steps read each KG (given at construction; the training job gives the DataModule)."""
    SETTINGS: dict[str, Callable[[Any], Any]] = {}
    """Settings node -> its conversion into a settings dataclass (a mapping, an instance or None in)."""

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Lightning's ``load_from_checkpoint`` of a checkpoint in today's hyper-parameter layout
        (:func:`~glmrag.models.checkpointing.check_layout`). Hyper-parameters that are missing, or that build a
        model the weights do not fit (a file edited by hand, or another model's), are a
        :class:`~glmrag.models.checkpointing.CheckpointMismatchError` naming the file, not torch's key list."""
        check_layout(checkpoint_path, weights_only=kwargs.get("weights_only") is not False)
        try:
            return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)
        except (RuntimeError, TypeError, KeyError, AttributeError) as err:  # AttributeError: hyper_parameters=None
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            raise CheckpointMismatchError(
                f"checkpoint {checkpoint_path}: its hyper-parameters do not build a {cls.__name__} its weights fit "
                f"({'; '.join(lines[:2])[:300]}); the file was edited or holds another model: use a checkpoint "
                "train.py wrote, unchanged"
            ) from err

    def kg_source(self) -> KGSource:
        """:attr:`kgs`, or a RuntimeError that says how to give it."""
        if self.kgs is None:
            name = type(self).__name__
            raise RuntimeError(
                f"{name} has no KGs to read: build it with kgs=<a KGSource, e.g. the DataModule> "
                f"({name}(..., kgs=datamodule) or {name}.load_from_checkpoint(path, kgs=datamodule))"
            )
        return self.kgs

    def checked_kg_source(self, reads: Sequence[str], fix: str) -> KGSource:
        """:meth:`kg_source`, refused with a TypeError when it lacks one of the methods ``reads`` (what this
        module's steps call on it); ``fix`` names the source to give instead."""
        kgs = self.kg_source()
        lacks = [name for name in reads if not callable(getattr(kgs, name, None))]
        if lacks:
            raise TypeError(
                f"{type(self).__name__} reads {', '.join(f'{name}(kg)' for name in reads)} of its kgs; "
                f"{type(kgs).__name__} lacks {', '.join(lacks)}: give {fix}"
            )
        return kgs

    def __deepcopy__(self, memo: dict[int, Any]) -> RetrieverModule:
        """A copy with weights of its own that reads the same :attr:`kgs`: the source (a DataModule, with its
        indexes and its Trainer) is the module's input, as a Trainer is, not part of it. A pickle (``ddp_spawn``
        sends the module to its processes so) still carries the source."""
        if self.kgs is not None:
            memo.setdefault(id(self.kgs), self.kgs)
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        copied.__setstate__(copy.deepcopy(self.__getstate__(), memo))  # what deepcopy does without this method
        return copied

    def init_evaluation(self, evaluation: Evaluation) -> None:
        """Create the metric objects of each stage for ``evaluation.ks``."""
        self.evaluation = evaluation
        self.ks = ks = evaluation.ks
        self.metric_names = [f"recall@{k}" for k in ks] + ["mrr"]
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_metrics = nn.ModuleDict({name: MeanMetric() for name in self.metric_names})
        self.test_metrics = nn.ModuleDict({name: MeanMetric() for name in self.metric_names})
        self.val_best = MaxMetric()
        self.val_best.persistent(True)  # saved in checkpoints, so a resumed run remembers the best epoch

    def reset_metrics(self, stage: str) -> None:
        """Fresh metric states outside inference mode (call from ``setup``).

        States reset at the end of a ``trainer.validate()`` are inference tensors, which a later
        ``trainer.fit()`` could not update in place. The best value starts afresh with each fit (a
        resumed fit then restores it from the checkpoint).
        """
        for metric in self.modules():
            if isinstance(metric, Metric) and (metric is not self.val_best or stage == "fit"):
                metric.reset()

    # -- supplied by subclasses --

    @abstractmethod
    def model_step(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss over the batch's real rows and the logits the ranking reads."""

    @abstractmethod
    def score(self, batch: dict[str, Any], logits: torch.Tensor | None = None) -> list[Scores]:
        """The scores of every row of ``batch``, one :class:`Scores` per KG; ``logits``: the batch's logits from
        :meth:`model_step`, computed here when None."""

    @abstractmethod
    def question_batch(self, questions: Sequence[Question], kg: str, question_emb: np.ndarray) -> dict[str, Any]:
        """The evaluation batch of ``questions`` asked over the KG ``kg`` of :attr:`kgs`, as this module's
        DataModule serves it; ``question_emb``: their ``(Q, d)`` sentence embeddings by ``embed_model``."""

    def rank(self, batch: dict[str, Any], top_k: int, logits: torch.Tensor | None = None) -> list[Ranking]:
        """One :class:`~glmrag.index.ranking.Ranking` per row of ``batch``: its ``top_k`` best passages, ranked by
        :meth:`score` and ``evaluation`` (the passage scores where :meth:`score` gives them, else the document
        ranker over the entity scores), and its ``evaluation.top_entities`` best entities. ``logits``: as
        :meth:`score`'s."""
        ranker, top_entities = self.evaluation.ranker, self.evaluation.top_entities
        with torch.no_grad():
            scored = self.score(batch, None if logits is None else logits.detach())
        by_row: dict[int, Ranking] = {}
        for s in scored:
            positions, values = rank_passages(s.entities, s.index, top_k, ranker, top_entities, s.passages)  # (b, k)
            entities, entity_values = top_k_stable(s.entities, top_entities)  # (b, top_entities)
            ids = [batch["question_ids"][row] for row in s.rows]
            ranked = make_rankings(ids, s.index.passage_ids, positions, values, entities, entity_values)
            by_row.update(zip(s.rows, ranked, strict=True))
        return [by_row[row] for row in range(len(batch["question_ids"]))]

    def parameter_groups(self) -> Iterable[nn.Parameter] | list[dict[str, Any]]:
        """What the optimizer gets as ``params``: all parameters unless a subclass splits them."""
        return self.parameters()

    # -- training, evaluation and the optimizer --

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self.model_step(batch)[0]
        self.log_train_loss(loss, len(batch["real"]))
        return loss

    def log_train_loss(self, loss: torch.Tensor, batch_size: int) -> None:
        """``train/loss`` of the step, averaged over the DDP ranks: the global batch's loss, as one process logs it."""
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=batch_size, sync_dist=True)

    def _eval_step(self, batch: dict[str, Any], loss_metric: MeanMetric, metrics: nn.ModuleDict) -> None:
        loss, logits = self.model_step(batch)
        real = batch["real"].tolist()
        loss_metric.update(loss, weight=sum(real))
        for row, (ranking, gold) in enumerate(zip(self.rank(batch, max(self.ks), logits), batch["gold"], strict=True)):
            if not real[row] or not gold:  # padding, or no gold passage (the evaluator excludes it)
                continue
            values = retrieval_metrics(ranking.passage_ids, gold, self.ks)
            for name in self.metric_names:
                metrics[name].update(values[name])

    def _log_epoch(self, prefix: str, loss_metric: MeanMetric, metrics: nn.ModuleDict) -> dict[str, torch.Tensor]:
        """Compute (synchronised across devices by torchmetrics), log and reset the epoch's metrics."""
        values = {"loss": loss_metric.compute(), **{name: m.compute() for name, m in metrics.items()}}
        for name, value in values.items():
            self.log(f"{prefix}/{name}", value, sync_dist=True, prog_bar=name in ("loss", BEST_METRIC))
        loss_metric.reset()
        for m in metrics.values():
            m.reset()
        return values

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, self.val_loss, self.val_metrics)

    def on_validation_epoch_end(self) -> None:
        values = self._log_epoch("val", self.val_loss, self.val_metrics)
        if self.trainer.sanity_checking:  # the sanity check's few batches do not count as an epoch
            return
        self.val_best(values[BEST_METRIC])
        self.log(f"val/{BEST_METRIC}_best", self.val_best.compute(), sync_dist=True, prog_bar=True)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, self.test_loss, self.test_metrics)

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test", self.test_loss, self.test_metrics)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record the layout of the hyper-parameters (:data:`~glmrag.models.checkpointing.HPARAMS_LAYOUT`), this
        module's class (:data:`MODULE_CLASS_KEY`) and the fingerprints of the questions the run trained and
        validated on (the evaluator refuses to score them, whatever the dataset is called:
        :mod:`glmrag.eval.overlap`)."""
        checkpoint[HPARAMS_LAYOUT_KEY] = HPARAMS_LAYOUT
        checkpoint[MODULE_CLASS_KEY] = f"{type(self).__module__}.{type(self).__qualname__}"
        seen = getattr(self.kgs, "seen_questions", None)
        if seen is not None:
            checkpoint[SEEN_QUESTIONS_KEY] = sorted(seen)
            checkpoint[SEEN_VERSION_KEY] = FINGERPRINT_VERSION
        if self._trainer is not None and self.trainer.state.fn == TrainerFn.FITTING:  # collective: every rank saves
            checkpoint[RANDOM_STREAMS_KEY] = random_streams()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the saved random states for :meth:`on_train_start` (a resumed fit; ``load_from_checkpoint`` too,
        whose later fits without ``ckpt_path`` ignore them)."""
        self._saved_streams = checkpoint.get(RANDOM_STREAMS_KEY)

    def on_train_start(self) -> None:
        """A fit resumed from a checkpoint: the training loader starts at the saved batch (also when
        :meth:`configure_optimizers` had Lightning build it before the restore), and every rank takes back its
        random states of the saved step, so dropout draws what the uninterrupted run drew
        (:mod:`glmrag.datamodules.resumable`)."""
        load_pending_loader_state(self.trainer)
        streams, self._saved_streams = getattr(self, "_saved_streams", None), None
        if streams and self.trainer.ckpt_path:
            restore_random_streams(streams, self.global_rank)

    def configure_optimizers(self) -> Any:
        """The optimizer, and the scheduler if one is set: a plain ``optimizer -> LRScheduler`` factory steps
        once an epoch (``monitor`` ``val/loss``, for ``ReduceLROnPlateau``); a :class:`StepSchedule` steps after
        every optimizer step over the run's ``trainer.estimated_stepping_batches``."""
        optimizer = self.optimizer_factory(params=self.parameter_groups())
        if self.scheduler_factory is None:
            return {"optimizer": optimizer}
        if isinstance(self.scheduler_factory, StepSchedule):
            total_steps = int(self.trainer.estimated_stepping_batches)
            if total_steps < 1:
                raise ValueError(
                    f"model.scheduler is a StepSchedule but this fit has {total_steps} optimizer steps: it needs at "
                    "least one (check trainer.limit_train_batches, max_epochs, max_steps) or model.scheduler=null"
                )
            scheduler = self.scheduler_factory.schedule(optimizer=optimizer, total_steps=total_steps)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
            }
        scheduler = self.scheduler_factory(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss", "interval": "epoch", "frequency": 1},
        }


def saved_module_class(checkpoint: Mapping[str, Any], path: str | os.PathLike[str]) -> type[RetrieverModule]:
    """The :class:`RetrieverModule` subclass that saved ``checkpoint``, the file at ``path`` (its
    :data:`MODULE_CLASS_KEY`).

    Only a class of the ``glmrag`` package is imported. A checkpoint that records none, or names something else,
    is a :class:`~glmrag.models.checkpointing.CheckpointLayoutError` naming the file and the fix.
    """
    name = checkpoint.get(MODULE_CLASS_KEY)
    found = None
    if isinstance(name, str) and name.split(".")[0] == "glmrag":
        module, _, attr = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attr, None)
        except ImportError:
            pass
    if isinstance(found, type) and issubclass(found, RetrieverModule):
        return found
    held = "records no module class" if name is None else f"names the module class {name!r}, which this glmrag lacks"
    raise CheckpointLayoutError(
        f"checkpoint {path} {held} ({MODULE_CLASS_KEY}), so it cannot be loaded as a retriever; train the model "
        "again with this glmrag"
    )


class StepSchedule:
    """A ``scheduler`` that :meth:`RetrieverModule.configure_optimizers` steps after every optimizer step.

    ``schedule`` is ``(optimizer=, total_steps=) -> LRScheduler``, e.g. ``torch.optim.lr_scheduler.OneCycleLR``
    with ``_partial_: true`` (warm-up, then annealing); ``total_steps`` is the run's number of optimizer steps
    (``trainer.estimated_stepping_batches``: epochs x batches, over accumulation), so the schedule fits any
    ``trainer.max_epochs`` or dataset size. The per-epoch default would warm up over whole epochs. With
    :func:`warmup_cosine` a resumed run follows the resumed run's step count (a run extended from 2 to 3
    epochs re-plans the rest of its schedule); torch's ``OneCycleLR`` restores its saved step count instead
    and fails once a resumed run outlasts it.
    """

    def __init__(self, schedule: Callable[..., Any]) -> None:
        if not callable(schedule):
            raise TypeError(
                f"StepSchedule.schedule must be a callable (optimizer=, total_steps=) -> LRScheduler, got "
                f"{schedule!r}; in YAML give it _partial_: true"
            )
        self.schedule = schedule

    def __repr__(self) -> str:
        return f"StepSchedule({self.schedule!r})"


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup: float = 0.1,
    start_factor: float = 1 / 25,
    final_factor: float = 1 / 25 / 1e4,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A one-cycle schedule for :class:`StepSchedule`: the lr rises from ``start_factor`` x lr to lr over the first
    ``warmup`` share of ``total_steps``, then falls to ``final_factor`` x lr, both along half a cosine.

    The shape and defaults of torch's ``OneCycleLR`` (``div_factor`` 25, ``final_div_factor`` 1e4), but its
    factor is a closure that a checkpoint does not store, so a resumed run uses its own ``total_steps`` and a
    step past the end keeps the final rate instead of raising.
    """
    peak = max(warmup * total_steps - 1.0, 0.0)  # OneCycleLR's end of the warm-up phase
    end = max(total_steps - 1.0, peak)

    def cosine(start: float, stop: float, share: float) -> float:
        return stop + (start - stop) / 2.0 * (math.cos(math.pi * min(max(share, 0.0), 1.0)) + 1.0)

    def factor(step: int) -> float:
        if step <= peak:
            return cosine(start_factor, 1.0, step / peak) if peak > 0 else 1.0
        return cosine(1.0, final_factor, (step - peak) / (end - peak)) if end > peak else final_factor

    return _Replanned(optimizer, factor)


class _Replanned(torch.optim.lr_scheduler.LambdaLR):
    """A ``LambdaLR`` that, once a checkpoint's state is loaded, sets the rate of the restored step from its own
    factor: the optimizer state restored before it carries the saved run's last rate."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for group, base, factor in zip(self.optimizer.param_groups, self.base_lrs, self.lr_lambdas, strict=True):
            group["lr"] = base * factor(self.last_epoch)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
