"""The training job through Hydra: every experiment config runs, the main job trains and evaluates."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from glmrag.training import evaluation_config, resolve_wandb_mode, run_train, wandb_logged_in

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml"))
TINY = ["model.hidden_channels=8", "model.num_layers=1", "data.limit=8", "logger=[csv]"]
TINY_GLM = [
    "model.t5_config={d_model: 16, d_ff: 32, num_layers: 1, num_heads: 2, d_kv: 8}",
    "model.tokenizer=offline:all-MiniLM-L6-v2",
    "model.max_triplets=30",
    "data.limit=8",
    "logger=[csv]",
]


def tiny(experiment: str) -> list[str]:
    return TINY_GLM if experiment.startswith("glm") else TINY


def _compose(overrides, return_hydra_config=False):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=return_hydra_config)


def _paths(tmp_path):
    return [f"output_dir={tmp_path / 'out'}", f"checkpoint_dir={tmp_path / 'ckpt'}"]


def test_experiments_exist():
    assert {"demo", "gfm_rag", "gfm_rag_star", "gfm_rag_plus", "glm_rag", "glm_demo", "glm_linear"} <= set(EXPERIMENTS)
    assert {f"glm_sweep_{s}" for s in ("hops", "triplets", "t5", "aggregation", "interaction", "encoding")} <= set(
        EXPERIMENTS
    )


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_fast_dev_run(experiment, glmrag_cache, tmp_path):
    cfg = _compose([f"experiment={experiment}", *tiny(experiment), *_paths(tmp_path), "+trainer.fast_dev_run=true"])
    assert cfg.run_name == f"{cfg.model_name}-musique100"
    out = run_train(cfg)
    assert out["metrics"]["train/loss"] >= 0.0
    assert out["best_checkpoint"] is None  # a smoke test: no checkpoint is tested or evaluated
    assert out["eval"] is None


def test_experiment_values_reach_the_model():
    plus = _compose(["experiment=gfm_rag_plus", "output_dir=x"])
    star = _compose(["experiment=gfm_rag_star", "output_dir=x"])
    assert plus.model.use_node_features and plus.datamodule.node_features and plus.model.hidden_channels == 512
    assert not star.model.use_node_features and star.pretrain is None
    assert _compose(["experiment=gfm_rag", "output_dir=x"]).pretrain.max_epochs == 1
    assert _compose(["output_dir=x"]).datamodule.task == "qa"


def test_main_job_trains_tests_and_evaluates_against_ppr(glmrag_cache, tmp_path):
    overrides = ["experiment=demo", "model.hidden_channels=16", "trainer.max_epochs=2", "retriever@baselines=[ppr]"]
    cfg = _compose([*overrides, "logger=[csv]", "n_boot=200", *_paths(tmp_path)])
    out = run_train(cfg)
    best = Path(out["best_checkpoint"])
    assert best.is_file() and (tmp_path / "ckpt" / "last.ckpt").is_file()
    assert 0.0 <= out["metrics"]["test/recall@2"] <= 1.0
    result = out["eval"]
    assert result.systems == ["gfm_rag_plus_demo-musique100", "ppr"]
    # Trainer.test and the evaluator rank the same test questions with the same code
    assert result.overall["gfm_rag_plus_demo-musique100"]["recall@2"].mean == pytest.approx(
        out["metrics"]["test/recall@2"], abs=1e-6
    )
    metrics = json.loads((tmp_path / "out" / "eval" / "metrics.json").read_text())
    assert metrics["reference"] == "gfm_rag_plus_demo-musique100"
    assert (tmp_path / "out" / "csv").is_dir()


def test_glm_trains_tests_and_evaluates_like_the_gnn(glmrag_cache, tmp_path):
    overrides = ["experiment=glm_demo", "trainer.max_epochs=1", "retriever@baselines=[ppr]", "data.limit=12"]
    cfg = _compose([*overrides, "model.max_triplets=40", "logger=[csv]", "n_boot=100", *_paths(tmp_path)])
    assert cfg.datamodule.max_triplets == 40 and cfg.datamodule.tokenizer == cfg.model.tokenizer
    out = run_train(cfg)
    result = out["eval"]
    assert result.systems == ["glm_demo-musique100", "ppr"]
    # The GLM checkpoint retriever rebuilds the subgraphs and ranks as Trainer.test did.
    assert result.overall["glm_demo-musique100"]["recall@2"].mean == pytest.approx(
        out["metrics"]["test/recall@2"], abs=1e-6
    )


def test_glm_ablation_values_reach_the_model_and_datamodule():
    linear = _compose(["experiment=glm_linear", "output_dir=x"])
    assert linear.model.layout == "linear" and linear.datamodule.layout == "linear" and linear.model.t5 == "t5-base"
    assert _compose(["experiment=glm_local", "output_dir=x"]).model.attention == "local"
    none = _compose(["experiment=glm_no_interaction", "output_dir=x"])
    assert not none.model.use_text and not none.datamodule.use_text and not none.model.query_interaction
    hops = _compose(["experiment=glm_rag", "model.max_hops=3", "model.max_triplets=300", "output_dir=x"])
    assert (hops.datamodule.max_hops, hops.datamodule.max_triplets) == (3, 300)


@pytest.mark.parametrize("sweep", [e for e in EXPERIMENTS if e.startswith("glm_sweep_")])
def test_glm_sweeps_vary_existing_model_settings_and_name_each_run(sweep):
    cfg = _compose([f"experiment={sweep}", "output_dir=x"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert params, f"{sweep} sweeps nothing"
    for key, values in params.items():
        assert OmegaConf.select(cfg, key, default="<missing>") != "<missing>", key
        assert len(str(values).split(",")) >= 2
        first = str(values).split(",")[0]
        named = _compose([f"experiment={sweep}", "output_dir=x", f"{key}={first}"])
        if len(params) == 1:  # the run name shows the swept value
            assert first in named.run_name


def test_pretraining_stage_feeds_fine_tuning(glmrag_cache, tmp_path):
    overrides = ["trainer.max_epochs=1", "+trainer.limit_train_batches=3", "evaluate=false", "data.limit=4"]
    cfg = _compose(["experiment=gfm_rag", *TINY, *_paths(tmp_path), *overrides])
    out = run_train(cfg)
    assert (tmp_path / "ckpt" / "pretrain" / "last.ckpt").is_file()
    assert Path(out["best_checkpoint"]).is_file()


def test_wandb_mode_follows_login(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert not wandb_logged_in() and resolve_wandb_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode("auto") == "online" and resolve_wandb_mode("offline") == "offline"
    with pytest.raises(ValueError, match="auto, online, offline or disabled"):
        resolve_wandb_mode("sometimes")


def test_wandb_logger_runs_offline_and_writes_no_key(glmrag_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    overrides = ["experiment=demo", *TINY, *_paths(tmp_path), "+trainer.fast_dev_run=true", "logger=[wandb]"]
    cfg = _compose(overrides)
    assert OmegaConf.select(cfg, "logger.wandb.mode") == "auto"
    run_train(cfg)
    runs = list((tmp_path / "out" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert b"WANDB_API_KEY" not in written


def test_several_training_kgs_evaluate_on_the_data_kg():
    cfg = _compose(
        [
            "experiment=demo",
            "datamodule.datasets=[musique100,2wiki_train]",
            "index.extractor={musique100: openie, 2wiki_train: spacy}",
            "output_dir=x",
        ]
    )
    assert list(cfg.datamodule.datasets) == ["musique100", "2wiki_train"]
    ev = evaluation_config(cfg, "best.ckpt")
    assert ev.index.extractor == "openie" and ev.data.split == "test"
    assert ev.retriever[cfg.run_name].ckpt_path == "best.ckpt" and set(ev.retriever) == {cfg.run_name, "dense", "ppr"}
