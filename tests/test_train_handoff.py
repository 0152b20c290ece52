"""The training job hands its checkpoint to the evaluation job (one schema: configs/eval.yaml), and a model that
training did not improve says so in the log, results.md, metrics.json and the store."""

import ast
import json
import logging
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from stand_ins import frozen_demo

from glmrag.jobs.common import checkpoint_run_name, compose_config
from glmrag.jobs.train import StartScore, evaluation_config, random_state_kept, run_train

ROOT = Path(__file__).resolve().parents[1]


def test_the_evaluation_after_training_is_eval_yaml_with_values_set(train_config):
    cfg = train_config(["experiment=demo", "output_dir=x", "ks=[1,2,5]", "n_boot=77"])
    schema = compose_config("eval")
    ev = evaluation_config(cfg, "best.ckpt", device="cuda:1")
    assert set(ev) == set(schema)  # every key of eval.yaml, and no other (max_llm_failures, reader, qa, ...)
    assert ev.qa is False and ev.max_llm_failures == schema.max_llm_failures and ev.top_k is None
    assert (list(ev.ks), ev.n_boot, ev.reference, ev.output_dir) == ([1, 2, 5], 77, cfg.run_name, "x/eval")
    node = ev.retriever[cfg.run_name]  # eval.yaml's checkpoint retriever, named by the run
    checkpoint = compose_config("eval", ["retriever=[checkpoint]", "ckpt_path=best.ckpt"]).retriever.checkpoint
    assert {k: node[k] for k in checkpoint} == dict(checkpoint) and node.device == "cuda:1"
    assert list(ev.retriever) == [cfg.run_name, *cfg.baselines]


def _imports(path: Path) -> set[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    return {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def test_no_job_imports_another_jobs_helpers():
    """train.py hands its checkpoint to the evaluation job's entry, run_eval, and takes nothing else from a job:
    the shared helpers live in glmrag.jobs.common, the wandb ones in glmrag.jobs.loggers."""
    jobs = ("train", "evaluate", "report")  # cli.py, the console scripts, calls the jobs: it is none
    taken = {
        (job, module, name)
        for job in jobs
        for module, name in _imports(ROOT / "glmrag" / "jobs" / f"{job}.py")
        if module in {f"glmrag.jobs.{other}" for other in jobs if other != job}
    }
    assert taken == {("train", "glmrag.jobs.evaluate", "run_eval")}


def _checkpoint(best: float | None, mode: str = "max") -> ModelCheckpoint:
    cb = ModelCheckpoint(monitor="val/recall@2", mode=mode)
    cb.best_model_score = None if best is None else torch.tensor(best)
    return cb


def test_the_start_score_warns_only_when_training_did_not_help():
    start = StartScore()
    start.monitor, start.score = "val/recall@2", 0.25
    assert "no better than the untrained model's (0.2500)" in start.no_better_warning([_checkpoint(0.25)])
    assert start.no_better_warning([_checkpoint(0.1)]) is not None
    assert start.no_better_warning([_checkpoint(0.26)]) is None
    assert start.no_better_warning([_checkpoint(0.2, mode="min")]) is None  # a loss: lower is better
    assert start.no_better_warning([_checkpoint(None)]) is None
    restored = StartScore()
    restored.load_state_dict(start.state_dict())  # a resumed run reads it from the checkpoint
    assert (restored.monitor, restored.score) == ("val/recall@2", 0.25)
    assert StartScore().no_better_warning([_checkpoint(0.0)]) is None  # resumed from an older checkpoint: unknown


def test_validating_before_training_leaves_the_random_streams():
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    with random_state_kept():
        torch.rand(100)
    assert torch.equal(torch.rand(3), expected)


def _tiny(tiny: str, tmp: Path, *extra: str) -> list[str]:
    """Two epochs at learning rate 0: the weights never move, so no epoch beats the untrained model."""
    # model.scheduler=null: a resumed run trains a third epoch, with no schedule sized for two
    return frozen_demo(tiny, tmp, "model.scheduler=null", "n_boot=20", f"checkpoint_dir={tmp / 'run'}", *extra)


@pytest.mark.integration  # two epochs on musique_tiny, 9 s
def test_a_model_training_did_not_improve_says_so(tiny_musique, glmrag_cache, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="glmrag.jobs.train")
    out = run_train(compose_config("train", _tiny(tiny_musique, tmp_path)))
    (warning,) = out["warnings"]
    assert "no better than the untrained model's" in warning and "val/recall@2" in warning
    assert warning in caplog.text
    assert out["metrics"]["val/recall@2_untrained"] == pytest.approx(out["metrics"]["val/recall@2_best"])
    results = (tmp_path / "out" / "eval" / "results.md").read_text()
    assert results.startswith(f"**{warning}**") and results.index(warning) < results.index("| System |")
    assert json.loads((tmp_path / "out" / "eval" / "metrics.json").read_text())["warnings"] == [warning]
    (stored,) = out["stored"]
    record = json.loads((stored / "metrics.json").read_text())
    assert record["warnings"] == [warning] and record["run"]["warnings"] == [warning]
    # the checkpoint, named by its run, and the model before training beside it: at lr 0 the same weights, the
    # same scores, so the untrained row is the trained row's code on the weights the run started from
    assert out["eval"].systems == ["gfm_rag_plus_demo-musique_tiny", "untrained", "dense", "ppr"]
    untrained = torch.load(tmp_path / "run" / "untrained.ckpt", weights_only=True)["state_dict"]
    best = torch.load(out["best_checkpoint"], weights_only=True)["state_dict"]
    assert untrained.keys() == best.keys() and all(torch.equal(untrained[k], best[k]) for k in best)
    overall = out["eval"].overall
    assert overall["untrained"]["recall@2"].mean == overall["gfm_rag_plus_demo-musique_tiny"]["recall@2"].mean
    assert "| untrained |" in results
    assert checkpoint_run_name(out["best_checkpoint"]) == "gfm_rag_plus_demo-musique_tiny"  # eval.py names it so

    # resumed for a third epoch: the untrained score comes from the checkpoint, and the warning with it
    again = _tiny(tiny_musique, tmp_path, "trainer.max_epochs=3", "ckpt_path=last", "evaluate=false")
    resumed = run_train(compose_config("train", again))
    assert resumed["warnings"] == [warning]


@pytest.mark.slow
def test_a_fast_dev_run_validates_nothing_before_training(tiny_musique, glmrag_cache, tmp_path, monkeypatch):
    """fast_dev_run is a smoke test of the loops: no untrained validation, no checkpoint, no warning."""
    monkeypatch.setattr(StartScore, "measure", lambda *a: pytest.fail("validated before a fast_dev_run"))
    out = run_train(compose_config("train", _tiny(tiny_musique, tmp_path, "+trainer.fast_dev_run=true")))
    assert out["warnings"] == [] and "val/recall@2_untrained" not in out["metrics"]


@pytest.mark.slow
def test_validating_the_untrained_model_leaves_the_training_unchanged(tiny_musique, glmrag_cache, tmp_path):
    """The same seed trains the same weights with and without the validation before training."""
    import lightning as L

    from glmrag.jobs.train import fit, make_loggers

    weights = []
    for measure in (False, True):
        over = _tiny(tiny_musique, tmp_path / str(measure), "model.optimizer.lr=0.01", "trainer.max_epochs=1")
        cfg = compose_config("train", over)
        L.seed_everything(0, workers=True)
        trainer, callbacks = fit(cfg, make_loggers(cfg), measure_start=measure)
        start = next(cb for cb in callbacks if isinstance(cb, StartScore))
        assert (start.score is not None) == measure
        weights.append({k: v.clone() for k, v in trainer.lightning_module.state_dict().items()})
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
