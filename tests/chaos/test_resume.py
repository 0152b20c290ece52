"""Resume: last.ckpt is the final epoch, and a resumed run writes to its checkpoint's folder and keeps the
best score. Minutes (a musique100 index in a fresh cache): ``pytest -m "chaos and slow"``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from glmrag.jobs.train import run_train
from tests.chaos.conftest import compose_config

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

# lr 0: the validation metric never improves after the first epoch, so the best checkpoint stays epoch 0
TINY = ["experiment=demo", "model.gnn.hidden_channels=8", "model.gnn.num_layers=1", "data.limit=8", "logger=[csv]"]
FROZEN = [*TINY, "model.optimizer.lr=0.0", "evaluate=false", "test=false", "callbacks.rich_progress_bar=null"]


def _epoch(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["epoch"]


def test_last_checkpoint_is_the_final_epoch_and_resume_keeps_folder_and_best(glmrag_cache, tmp_path):
    first = tmp_path / "ck-first"
    paths = [f"output_dir={tmp_path / 'o1'}", f"results_dir={tmp_path / 'r'}"]
    out = run_train(compose_config("train", [*FROZEN, *paths, f"checkpoint_dir={first}", "trainer.max_epochs=3"]))
    assert _epoch(first / "last.ckpt") == 2  # Lightning's save_last alone left epoch 0 here
    best = torch.load(out["best_checkpoint"], map_location="cpu", weights_only=True)
    assert best["epoch"] == 0

    moved = tmp_path / "ck-elsewhere"  # e.g. a new ${now}: the resumed run must not write there
    paths = [f"output_dir={tmp_path / 'o2'}", f"results_dir={tmp_path / 'r'}", f"checkpoint_dir={moved}"]
    resumed = run_train(
        compose_config("train", [*FROZEN, *paths, "trainer.max_epochs=4", f"ckpt_path={first / 'last.ckpt'}"])
    )
    assert not moved.exists()
    assert _epoch(first / "last.ckpt") == 3
    assert Path(resumed["best_checkpoint"]) == Path(out["best_checkpoint"])  # the best score carried over
