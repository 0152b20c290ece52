"""Training curves as a PNG: ``train/loss`` per step and the validation metrics per epoch.

:class:`TrainingCurves` is a Lightning callback (``configs/callbacks/default.yaml``) that records the
synchronised ``train/loss`` of every optimizer step and the ``val/*`` values of every validation, and
writes ``training_curves.png`` into the run's output folder on rank 0 when fitting ends (temp file,
then rename). Its points are saved in checkpoints, so a resumed run draws the whole run.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from glmrag.io import atomic_write_bytes

LOSS = "train/loss"
SMOOTH_STEPS = 10
"""Steps in the running mean drawn over the per-step losses (engineering choice: the demo's 15 steps per epoch)."""


class TrainingCurves(Callback):
    """Record ``train/loss`` per step and ``val/*`` per validation; write them as a PNG to ``path`` at fit end.

    Args:
        path: the PNG to write (``${output_dir}/training_curves.png``).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.steps: list[tuple[int, float]] = []
        """``(global step, train/loss)`` after each optimizer step."""
        self.epochs: list[tuple[int, int, dict[str, float]]] = []
        """``(epochs trained, global step, {val metric: value})`` after each validation (sanity check excluded;
        a validation before fit, of the untrained model, has 0 epochs trained)."""

    @property
    def state_key(self) -> str:
        return type(self).__qualname__  # not the path: a resumed run writes to a new output folder

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        value = trainer.callback_metrics.get(LOSS)
        if value is None and isinstance(outputs, dict):
            value = outputs.get("loss")
        if value is not None:
            self.steps.append((trainer.global_step, float(value)))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        values = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/") and v.numel() == 1}
        if values:
            trained = trainer.current_epoch + (1 if trainer.state.fn == "fit" else 0)  # trainer.validate: before fit
            self.epochs.append((trained, trainer.global_step, values))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and (self.steps or self.epochs):
            self.write()

    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "epochs": list(self.epochs)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps = [tuple(s) for s in state_dict.get("steps", [])]
        self.epochs = [(e, s, dict(v)) for e, s, v in state_dict.get("epochs", [])]

    def write(self) -> Path:
        """Draw the recorded points into :attr:`path`; returns it."""
        buffer = io.BytesIO()
        FigureCanvasAgg(curves_figure(self.steps, self.epochs)).print_png(buffer)
        return atomic_write_bytes(self.path, buffer.getvalue())


def running_mean(values: list[float], window: int) -> list[float]:
    """Mean of each value and the up to ``window - 1`` values before it."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def curves_figure(steps: list[tuple[int, float]], epochs: list[tuple[int, int, dict[str, float]]]) -> Figure:
    """Left: train/loss per step (points, a running mean) and val/loss per epoch; right: the other val
    metrics (×100) per epoch. Dotted verticals mark the validations."""
    fig = Figure(figsize=(11, 4))
    loss_ax, metric_ax = fig.subplots(1, 2)
    if steps:
        x, y = zip(*steps, strict=True)
        loss_ax.plot(x, y, ".", alpha=0.35, color="tab:blue", label=f"{LOSS} (per step)")
        if len(y) > 1:
            window = min(SMOOTH_STEPS, len(y))
            loss_ax.plot(x, running_mean(list(y), window), color="tab:blue", label=f"{LOSS} (mean of {window})")
    val_loss = [(step, v["val/loss"]) for _, step, v in epochs if math.isfinite(v.get("val/loss", math.nan))]
    if val_loss:
        loss_ax.plot(*zip(*val_loss, strict=True), "s-", color="tab:orange", label="val/loss (per epoch)")
    for _, step, _ in epochs:
        loss_ax.axvline(step, color="grey", linestyle=":", linewidth=0.8)
    loss_ax.set(title="Loss", xlabel="optimizer step", ylabel="loss")
    names = sorted({k for *_, v in epochs for k in v if k != "val/loss"})
    for i, name in enumerate(names):
        points = [(trained, 100 * v[name]) for trained, _, v in epochs if name in v]
        style = "--" if name.endswith("_best") else "-"
        metric_ax.plot(*zip(*points, strict=True), style, marker="os^Dv"[i % 5], label=name)
    metric_ax.set(title="Validation", xlabel="epochs trained (0: the untrained model)", ylabel="×100")
    if epochs:
        metric_ax.set_xticks(sorted({trained for trained, *_ in epochs}))
    for ax in (loss_ax, metric_ax):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
