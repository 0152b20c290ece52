"""What every trained retriever's LightningModule shares: evaluation by the evaluator's metrics, logging,
the best-epoch tracker and the optimizer.

A subclass supplies ``model_step(batch) -> (loss, logits)`` and ``ranked_passages(batch, logits)``, the
passage ids it ranks for each row, best first. Validation and test then score those lists with
:func:`glmrag.index.ranking_metrics.retrieval_metrics` (lists of ``max(ks)`` passages; rows that are padding or
have no gold passage are left out, as the evaluator does), so ``val/recall@2`` is the number the
evaluator reports for a checkpoint retriever of the module on the same questions.

Log keys (lightning-hydra-template): ``train/loss``; ``val/loss``, ``val/recall@k``, ``val/mrr`` and
``val/recall@2_best``; ``test/...`` likewise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from lightning import LightningModule
from torch import nn
from torchmetrics import MaxMetric, MeanMetric, Metric

from glmrag.index.ranking import RANKERS
from glmrag.index.ranking_metrics import retrieval_metrics
from glmrag.models.checkpointing import SEEN_QUESTIONS_KEY

BEST_METRIC = "recall@2"
"""The headline metric (GLM-RAG §5) whose best value is logged as ``val/recall@2_best``."""

Optimizer = Callable[..., torch.optim.Optimizer]


class RetrieverModule(LightningModule, ABC):
    """Base class of the retriever modules; call :meth:`init_evaluation` in ``__init__``."""

    optimizer_factory: Optimizer
    scheduler_factory: Callable[[torch.optim.Optimizer], Any] | None

    def init_evaluation(self, ks: Sequence[int], ranker: str) -> tuple[int, ...]:
        """Create the metric objects of each stage; returns ``ks`` as a sorted plain tuple."""
        if ranker not in RANKERS:
            raise ValueError(f"ranker must be one of {RANKERS}, got {ranker!r}")
        ks = tuple(sorted({int(k) for k in ks}))  # a plain tuple (not a Hydra ListConfig) in the checkpoint
        if 2 not in ks:
            raise ValueError(f"ks must include 2 (val/{BEST_METRIC}_best is tracked), got {ks}")
        self.ks = ks
        self.metric_names = [f"recall@{k}" for k in ks] + ["mrr"]
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_metrics = nn.ModuleDict({name: MeanMetric() for name in self.metric_names})
        self.test_metrics = nn.ModuleDict({name: MeanMetric() for name in self.metric_names})
        self.val_best = MaxMetric()
        self.val_best.persistent(True)  # saved in checkpoints, so a resumed run remembers the best epoch
        return ks

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
    def ranked_passages(self, batch: dict[str, Any], logits: torch.Tensor) -> list[list[str]]:
        """For each row of ``batch``, the ids of its ``max(ks)`` best passages, best first."""

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
        for row, (ranked, gold) in enumerate(zip(self.ranked_passages(batch, logits), batch["gold"], strict=True)):
            if not real[row] or not gold:  # padding, or no gold passage (the evaluator excludes it)
                continue
            values = retrieval_metrics(ranked, gold, self.ks)
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
        """Record the fingerprints of the questions the run trained and validated on (the evaluator refuses
        to score them, whatever the dataset is called: :mod:`glmrag.eval.overlap`)."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        seen = getattr(datamodule, "seen_questions", None)
        if seen is not None:
            checkpoint[SEEN_QUESTIONS_KEY] = sorted(seen)

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(params=self.parameter_groups())
        if self.scheduler_factory is None:
            return {"optimizer": optimizer}
        scheduler = self.scheduler_factory(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss", "interval": "epoch", "frequency": 1},
        }
