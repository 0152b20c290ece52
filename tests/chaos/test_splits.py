"""Training questions are never scored as test questions (issue 22, probes 61-64): the same files under another
dataset name, a checkpoint whose stored splits lie, and a training split that is the test split."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from glmrag.data import registry
from glmrag.jobs.config_check import ConfigError, validate_train_config
from glmrag.jobs.evaluate import run_eval
from glmrag.jobs.train import run_train
from glmrag.models.checkpointing import SEEN_QUESTIONS_KEY
from tests.chaos.conftest import compose_config

pytestmark = pytest.mark.chaos


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Datasets registered by a test (``data=files``) are forgotten after it."""
    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))


@pytest.fixture(scope="module")
def checkpoint(tiny_musique, glmrag_cache, tmp_path_factory) -> Path:
    """The best checkpoint of a one-epoch demo on musique_tiny (10 train / 3 validation / 3 test questions)."""
    tmp = tmp_path_factory.mktemp("split-run")
    overrides = ["experiment=demo", f"data.name={tiny_musique}"]
    overrides += ["model.gnn.hidden_channels=8", "model.gnn.num_layers=1"]
    overrides += ["trainer.max_epochs=1", "logger=[csv]", "evaluate=false", "test=false"]
    overrides += ["callbacks.rich_progress_bar=null", f"output_dir={tmp / 'out'}", f"results_dir={tmp / 'r'}"]
    out = run_train(compose_config("train", [*overrides, f"checkpoint_dir={tmp / 'run'}"]))
    return Path(out["best_checkpoint"])


def evaluate(checkpoint: Path, tmp: Path, *overrides: str):
    base = ["retriever=[checkpoint,dense]", f"ckpt_path={checkpoint}", f"output_dir={tmp / 'eval'}", "n_boot=50"]
    return run_eval(compose_config("eval", [*base, f"results_dir={tmp / 'r'}", *overrides]))


def test_a_checkpoint_records_the_questions_it_trained_and_validated_on(checkpoint):
    seen = torch.load(checkpoint, weights_only=True)[SEEN_QUESTIONS_KEY]
    assert len(seen) == 13 and seen == sorted(seen)  # 10 training + 3 validation questions


def test_the_same_files_under_another_name_are_refused_then_flagged(checkpoint, tiny_musique_files, tmp_path):
    questions, corpus = tiny_musique_files
    copy = ["data=files", "data.format=hipporag", "data.name=small_copy", f"data.questions={questions}"]
    copy += [f"data.corpus={corpus}", "data.split=null"]
    run = "gfm_rag_plus_demo-musique_tiny"  # the checkpoint's system is named by its run
    with pytest.raises(ValueError, match=rf"retriever {run} .* trained or validated on 13 of the 16 questions"):
        evaluate(checkpoint, tmp_path, *copy)
    result = evaluate(checkpoint, tmp_path, *copy, "allow_train_overlap=true")
    assert result.train_overlap == {run: "13 of these 16 questions"}
    assert "evaluated on questions it trained or selected on" in (tmp_path / "eval" / "results.md").read_text()


def test_stored_splits_that_lie_do_not_decide(checkpoint, tiny_musique, tmp_path):
    lying = tmp_path / "lying.ckpt"
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["datamodule_hyper_parameters"]["test_split"] = "train"  # data.split=null would pick its training split
    torch.save(ckpt, lying)
    with pytest.raises(ValueError, match=r"trained or validated on 10 of the 10 questions"):
        evaluate(lying, tmp_path, "data=musique100", f"data.name={tiny_musique}", "data.split=null")


def test_training_on_the_split_the_run_scores_is_refused_before_training(train_config):
    for override, scored in (
        ("datamodule.train_split=test", "eval_split"),
        ("datamodule.val_split=test", "eval_split"),
    ):
        cfg = train_config(["experiment=demo", "output_dir=x", override])
        with pytest.raises(ConfigError, match=rf"{override.split('=')[0]}='test' is also the run's {scored}"):
            validate_train_config(cfg)
    cfg = train_config(["experiment=demo", "output_dir=x", "datamodule.train_split=test", "evaluate=false"])
    with pytest.raises(ConfigError, match=r"datamodule.test_split"):  # Trainer.test scores it too
        validate_train_config(cfg)
    transfer = ["experiment=demo", "output_dir=x", "datamodule.train_split=test", "test=false", "eval_data=[2wiki_dev]"]
    validate_train_config(train_config(transfer))  # the test split of another dataset is no overlap
