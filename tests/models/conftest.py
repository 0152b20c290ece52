"""Fixtures shared by the LightningModule and DataModule tests."""

import lightning as L
import pytest


@pytest.fixture(scope="session")
def cpu_trainer():
    """A factory of quiet, deterministic one-process CPU Trainers; keyword arguments go to ``L.Trainer``.

    No logger, progress bar, model summary or sanity validation: tests read ``callback_metrics`` and the
    values ``validate`` returns.
    """

    def make(**kwargs) -> L.Trainer:
        return L.Trainer(
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            deterministic=True,
            **kwargs,
        )

    return make
