"""Training progress as log lines, for a run whose output is a log file rather than a terminal.

Lightning's progress bar draws nothing into a log, so a job in a batch system (or piped to a file) was
silent for whole epochs. :class:`LogProgress` logs a line every :data:`glmrag.progress.LOG_EVERY_S`
seconds during fit, validation and test (batch, rate, time left in the epoch, the latest ``train/loss``;
a timer repeats the latest while one batch runs long) and one line per epoch with its metrics. On a
terminal, or with ``quiet`` (:mod:`glmrag.progress`), it logs nothing: the bar is there.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import lightning as L
from lightning.pytorch.callbacks import Callback

from glmrag.progress import LOG_EVERY_S, is_quiet

log = logging.getLogger(__name__)


class LogProgress(Callback):
    """Log lines of training progress when stderr is not a terminal (see the module docstring).

    Args:
        every_s: seconds between two lines within an epoch.
        on_terminal: also log when stderr is a terminal (for tests).
    """

    def __init__(self, every_s: float = LOG_EVERY_S, on_terminal: bool = False) -> None:
        self.every_s = every_s
        self.on_terminal = on_terminal
        self._start: dict[str, float] = {}
        """When the current train / validation / test epoch began."""
        self._last = 0.0
        self._state: tuple | None = None
        """``(kind, label, batches done, total, train/loss)`` of the latest batch."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def _active(self, trainer: L.Trainer) -> bool:
        return trainer.is_global_zero and not is_quiet() and (self.on_terminal or not sys.stderr.isatty())

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Start the timer that logs the latest state while one batch runs longer than ``every_s``."""
        if self._active(trainer) and self._ticker is None:
            self._stop.clear()
            self._last = time.perf_counter()
            self._ticker = threading.Thread(target=self._heartbeat, name="LogProgress", daemon=True)
            self._ticker.start()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker, self._state = None, None

    def _heartbeat(self) -> None:
        while not self._stop.wait(max(self.every_s - (time.perf_counter() - self._last), 0.05)):
            self._maybe_log()

    def _begin(self, kind: str, label: str | None = None, total=None) -> None:
        """A train / validation / test epoch starts: the timer reports it before its first batch ends."""
        self._start[kind] = time.perf_counter()
        if label is not None:
            self._state = (kind, label, 0, total, None)

    def _tick(self, trainer: L.Trainer, kind: str, label: str, batch_idx: int, total) -> None:
        if not self._active(trainer):
            return
        loss = trainer.callback_metrics.get("train/loss") if kind == "train" else None
        self._state = (kind, label, batch_idx + 1, total, None if loss is None else float(loss))
        self._maybe_log()

    def _maybe_log(self) -> None:
        """Log the latest state when ``every_s`` passed since the last line (from a hook or the timer)."""
        with self._lock:
            now = time.perf_counter()
            if self._state is None or now - self._last < self.every_s:
                return
            self._last = now
            kind, label, done, total, loss = self._state
            seconds = now - self._start.get(kind, now)
            if done == 0:
                of = f" of {int(total)}" if isinstance(total, int | float) and 0 < total < float("inf") else ""
                log.info("%s: first batch%s running for %.0f s", label, of, seconds)
                return
            rate = done / seconds if seconds > 0 else 0.0
            known = isinstance(total, int | float) and 0 < total < float("inf")
            of = f"/{int(total)}" if known else ""
            left = f", ~{(total - done) / rate:.0f} s left" if known and rate > 0 else ""
            loss_text = f", train/loss {loss:.4f}" if loss is not None else ""
            log.info("%s: %d%s batches, %.2f batch/s%s%s", label, done, of, rate, left, loss_text)

    def _epoch(self, trainer: L.Trainer) -> str:
        return f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}"

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._begin("train", self._epoch(trainer), trainer.num_training_batches)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        self._tick(trainer, "train", self._epoch(trainer), batch_idx, trainer.num_training_batches)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._begin("val", *self._validation(trainer))

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        label, total = self._validation(trainer)
        self._tick(trainer, "val", label, batch_idx, total)

    def _validation(self, trainer: L.Trainer) -> tuple[str, int | float]:
        """Label and batch count of the validation running now."""
        total = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
        total = sum(total) if isinstance(total, list) else total
        if trainer.sanity_checking:
            return "sanity check", total
        fitting = trainer.state.fn == "fit"  # else Trainer.validate, as before training (glmrag.jobs.train)
        return (f"{self._epoch(trainer)} validation" if fitting else "validation"), total

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        total = trainer.num_test_batches
        self._begin("test", "test", sum(total) if isinstance(total, list) else total)

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        total = sum(trainer.num_test_batches) if isinstance(trainer.num_test_batches, list) else None
        self._tick(trainer, "test", "test", batch_idx, total)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active(trainer):
            return
        start = self._start.pop("train", None)
        if start is None:  # no epoch started in this process: a resume restored one that had ended
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if "/" in k and v.numel() == 1}
        shown = ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()) if k.startswith(("train/", "val/")))
        seconds = time.perf_counter() - start
        with self._lock:
            log.info("%s done in %.0f s: %s", self._epoch(trainer), seconds, shown)
            self._last = time.perf_counter()
