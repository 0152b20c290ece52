"""Resume: a resume trains what its checkpoint trained (any other change is refused by key); last.ckpt is the
final epoch, and a resumed run writes to its checkpoint's folder and keeps the best score (minutes: a
musique100 index in a fresh cache, ``pytest -m "chaos and slow"``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from glmrag.jobs.config_check import ConfigError
from glmrag.jobs.train import run_train
from tests.chaos.conftest import compose_config

pytestmark = pytest.mark.chaos

# lr 0: the validation metric never improves after the first epoch, so the best checkpoint stays epoch 0
TINY = ["experiment=demo", "model.gnn.hidden_channels=8", "model.gnn.num_layers=1", "data.limit=8", "logger=[csv]"]
FROZEN = [*TINY, "model.optimizer.lr=0.0", "evaluate=false", "test=false", "callbacks.rich_progress_bar=null"]


def _epoch(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["epoch"]


@pytest.mark.slow
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


@pytest.fixture(scope="module")
def one_epoch(tiny_musique, glmrag_cache, tmp_path_factory) -> tuple[list[str], Path]:
    """The overrides and last.ckpt of a one-epoch demo on musique_tiny."""
    tmp = tmp_path_factory.mktemp("resume")
    same = [*FROZEN[:3], f"data.name={tiny_musique}", "logger=[csv]", "evaluate=false", "test=false"]
    same += ["callbacks.rich_progress_bar=null", f"results_dir={tmp / 'r'}", f"checkpoint_dir={tmp / 'run'}"]
    run_train(compose_config("train", [*same, f"output_dir={tmp / 'o'}", "trainer.max_epochs=1"]))
    return same, tmp / "run" / "last.ckpt"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ("datamodule.batch_size=3", "datamodule.batch_size: 4 in the checkpoint, 3 now"),
        ("seed=7", "seed: 0 in the checkpoint, 7 now"),
        ("data.limit=5", "data.limit: None in the checkpoint, 5 now"),
        ("model.optimizer.lr=0.123", "model.optimizer.lr: 0.01 in the checkpoint, 0.123 now"),
    ],
)
def test_a_resume_that_changes_what_is_trained_is_refused_naming_the_key(one_epoch, tmp_path, monkeypatch, change, key):
    """Probe: a resume with another batch size, seed, data.limit or lr went on silently (with data.limit=20,
    0 steps trained; with a new lr, the old lr's losses under a config.yaml naming the new one)."""
    same, last = one_epoch
    monkeypatch.setattr("lightning.Trainer.fit", lambda *a, **k: pytest.fail("training started"))
    cfg = compose_config("train", [*same, f"output_dir={tmp_path}", f"ckpt_path={last}", change])
    with pytest.raises(ConfigError, match=rf"ckpt_path=.*last.ckpt: .*{re.escape(key)}"):
        run_train(cfg)
