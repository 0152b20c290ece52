"""The training job's own callbacks: the loss-curve PNG and the progress lines of a run logged to a file."""

import logging
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from PIL import Image

from glmrag.models.curves import TrainingCurves, running_mean
from glmrag.models.log_progress import LogProgress

ROOT = Path(__file__).resolve().parents[2]
BATCHES = 5  # per epoch, fewer than Lightning's and the old config's log_every_n_steps (10)


class Regression(L.LightningModule):
    """y = 2x on 5 batches of 4, logging train/loss per step and val/loss, val/recall@2 per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.x = torch.linspace(0, 1, 4 * BATCHES)

    def _loss(self, idx):
        x = self.x[idx * 4 : idx * 4 + 4]
        return ((self.w * x - 2 * x) ** 2).mean()

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch_idx)
        self.log("train/loss", loss, on_step=True, on_epoch=False, batch_size=4)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self._loss(batch_idx), batch_size=4)
        self.log("val/recall@2", 1.0 / (1.0 + self._loss(batch_idx)), batch_size=4)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)

    def train_dataloader(self):
        return [0] * BATCHES

    def val_dataloader(self):
        return [0] * 2


def _fit(callbacks, cpu_trainer, epochs=2):
    trainer = cpu_trainer(max_epochs=epochs, callbacks=callbacks, log_every_n_steps=10, enable_checkpointing=False)
    trainer.fit(Regression())
    return trainer


def test_training_curves_record_every_step_and_epoch_and_write_a_png(tmp_path, cpu_trainer):
    """Issue 25 item 11: 15 steps per epoch logged every 10 steps gave 7 loss points and no plot."""
    curves = TrainingCurves(tmp_path / "run" / "training_curves.png")
    _fit([curves], cpu_trainer)
    assert [s for s, _ in curves.steps] == list(range(1, 2 * BATCHES + 1))  # every step, not every 10th
    assert curves.steps[-1][1] < curves.steps[0][1]  # the loss falls
    assert [(e, s) for e, s, _ in curves.epochs] == [(1, BATCHES), (2, 2 * BATCHES)]  # epochs trained
    assert set(curves.epochs[0][2]) == {"val/loss", "val/recall@2"}
    with Image.open(tmp_path / "run" / "training_curves.png") as image:
        assert image.format == "PNG" and image.size[0] > 600
    assert not list((tmp_path / "run").glob("*.tmp*"))  # written beside, then renamed


def test_a_validation_before_fit_is_the_untrained_point(tmp_path, cpu_trainer):
    # the training job validates the untrained model first: it must not share epoch 1's x with the trained one
    curves = TrainingCurves(tmp_path / "curves.png")
    trainer = cpu_trainer(max_epochs=1, callbacks=[curves], enable_checkpointing=False)
    model = Regression()
    trainer.validate(model)
    trainer.fit(model)
    assert [(e, s) for e, s, _ in curves.epochs] == [(0, 0), (1, BATCHES)]


def test_training_curves_survive_a_resume(tmp_path):
    first = TrainingCurves(tmp_path / "a.png")
    first.steps, first.epochs = [(1, 0.5), (2, 0.25)], [(0, 2, {"val/loss": 0.3})]
    resumed = TrainingCurves(tmp_path / "a.png")
    resumed.load_state_dict(first.state_dict())
    assert resumed.steps == first.steps and resumed.epochs == first.epochs
    assert resumed.write().read_bytes().startswith(b"\x89PNG")


def test_running_mean():
    assert running_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]


def test_log_progress_logs_batches_and_epochs_when_not_on_a_terminal(caplog, cpu_trainer, monkeypatch):
    """Issue 25 item 8: the Rich bar writes nothing into a log file, so training looked hung."""
    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    with caplog.at_level(logging.INFO, logger="glmrag.models.log_progress"):
        _fit([LogProgress(every_s=0.0, on_terminal=True)], cpu_trainer)
    lines = [r.getMessage() for r in caplog.records if r.name == "glmrag.models.log_progress"]
    assert any(line.startswith(f"epoch 1/2: 3/{BATCHES} batches, ") and "train/loss " in line for line in lines), lines
    assert any(line.startswith("epoch 2/2 validation: 2/2 batches") for line in lines), lines
    (done,) = [line for line in lines if line.startswith("epoch 2/2 done in ")]
    assert "train/loss " in done and "val/recall@2 " in done


@pytest.mark.parametrize("quiet", [True, False])
def test_log_progress_is_silent_when_quiet_or_on_a_terminal(quiet, caplog, cpu_trainer, monkeypatch):
    monkeypatch.setenv("GLMRAG_QUIET", "1" if quiet else "0")
    monkeypatch.setattr("sys.stderr.isatty", lambda: not quiet)
    with caplog.at_level(logging.INFO, logger="glmrag.models.log_progress"):
        _fit([LogProgress(every_s=0.0)], cpu_trainer, epochs=1)
    assert not [r for r in caplog.records if r.name == "glmrag.models.log_progress"]


def test_the_training_config_wires_both_callbacks_and_logs_every_step():
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", ["experiment=demo", "output_dir=/runs/x"])
    assert cfg.callbacks.training_curves.path == "/runs/x/training_curves.png"
    assert cfg.callbacks.log_progress._target_ == "glmrag.models.log_progress.LogProgress"
    assert cfg.trainer.log_every_n_steps == 1  # the demo's epochs have 15 steps


def test_log_progress_repeats_the_latest_state_while_a_batch_runs_long(caplog, monkeypatch):
    """Under load one training step took a minute; the timer keeps the log from going silent meanwhile."""
    import time

    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    trainer = type("T", (), {"is_global_zero": True, "callback_metrics": {}})()
    progress = LogProgress(every_s=0.05, on_terminal=True)
    with caplog.at_level(logging.INFO, logger="glmrag.models.log_progress"):
        progress.setup(trainer, None, "fit")
        progress._begin("train")
        progress._tick(trainer, "train", "epoch 1/5", 0, 15)
        time.sleep(0.3)  # the second batch is slow
        progress.teardown(trainer, None, "fit")
    lines = [r.getMessage() for r in caplog.records if r.name == "glmrag.models.log_progress"]
    assert any(line.startswith("epoch 1/5: 1/15 batches, ") for line in lines), lines


def test_a_validation_outside_fit_is_not_called_an_epoch(caplog, cpu_trainer, monkeypatch):
    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    trainer = cpu_trainer(callbacks=[LogProgress(every_s=0.0, on_terminal=True)])
    with caplog.at_level(logging.INFO, logger="glmrag.models.log_progress"):
        trainer.validate(Regression())
    lines = [r.getMessage() for r in caplog.records if r.name == "glmrag.models.log_progress"]
    assert lines and all(line.startswith("validation: ") and " batches, " in line for line in lines), lines


def test_log_progress_reports_an_epoch_whose_first_batch_is_slow(caplog, monkeypatch):
    """The demo's sanity check took 33 s for its first batch, and nothing was logged until it ended."""
    import time

    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    trainer = type("T", (), {"is_global_zero": True, "callback_metrics": {}})()
    progress = LogProgress(every_s=0.05, on_terminal=True)
    with caplog.at_level(logging.INFO, logger="glmrag.models.log_progress"):
        progress.setup(trainer, None, "fit")
        progress._begin("val", "sanity check", 2)
        time.sleep(0.3)
        progress.teardown(trainer, None, "fit")
    lines = [r.getMessage() for r in caplog.records if r.name == "glmrag.models.log_progress"]
    assert any(line.startswith("sanity check: first batch of 2 running for 0 s") for line in lines), lines


def test_log_progress_says_nothing_of_an_epoch_a_resume_restored(caplog, monkeypatch):
    # resumed from a preemption checkpoint written after an epoch's batches, Lightning ends that epoch again in
    # the new process without starting it: no "done in -0 s" line with no metrics
    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    trainer = type("T", (), {"is_global_zero": True, "callback_metrics": {}, "current_epoch": 2, "max_epochs": 5})()
    progress = LogProgress(every_s=60.0, on_terminal=True)
    with caplog.at_level(logging.INFO, logger="glmrag.models.log_progress"):
        progress.on_train_epoch_end(trainer, None)  # restored, never started here
        progress._begin("train", "epoch 4/5", 15)
        progress.on_train_epoch_end(trainer, None)
    done = [r.getMessage() for r in caplog.records if " done in " in r.getMessage()]
    assert done == ["epoch 3/5 done in 0 s: "], done
