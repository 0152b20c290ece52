"""The training job through Hydra: every experiment config runs, the main job trains and evaluates."""

import itertools
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from glmrag.jobs.loggers import resolve_wandb_mode, wandb_logged_in
from glmrag.jobs.train import evaluation_config, run_train
from glmrag.models.gnn_module import GNNRetrieverModule

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("study_*.yaml"))
EXPERIMENTS = sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml"))
# The paper configs embed with all-mpnet-base-v2 from the hub; the tests run offline on MiniLM.
OFFLINE = ["index.embed_model=offline:all-MiniLM-L6-v2", "index.embed_dim=384"]
TINY = ["model.gnn.hidden_channels=8", "model.gnn.num_layers=1", "data.limit=8", "logger=[csv]", *OFFLINE]
ON_MUSIQUE = ["data=musique100", "datamodule.datasets=[musique100]", "index.extractor=openie", "eval_data=null"]
TINY_GLM = [
    *OFFLINE,
    "model.glm.encoder_config={d_model: 16, d_ff: 32, num_layers: 1, num_heads: 2, d_kv: 8}",
    "model.glm.tokenizer=offline:all-MiniLM-L6-v2",
    "model.subgraph.max_triplets=30",
    "data.limit=8",
    "logger=[csv]",
]

TINY_MPNET_GLM = [
    *(o for o in TINY_GLM if not o.startswith("model.glm.encoder_config")),
    "model.glm.encoder_config={hidden_size: 16, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 32}",
    "model.glm.frozen_layers=1",
]
"""A tiny random MPNet for experiment=glm_2wiki_cpu (the real one needs the [mpnet] extra)."""


def first_run(experiment: str) -> list[str]:
    """A study's first run: the first value of each key it sweeps (a study file alone is no run of it)."""
    if not experiment.startswith("study_"):
        return []
    params = _compose([f"experiment={experiment}", "output_dir=x"], return_hydra_config=True).hydra.sweeper.params
    return [f"{key}={str(values).split(',')[0]}" for key, values in params.items()]


def tiny(experiment: str, run: list[str] = ()) -> list[str]:
    """Tiny sizes for the model the experiment trains: the GLM's when it, or the system a study run
    picks (``+system=glm_...``, ``+system/capacity=glm_rag``), is named glm*."""
    system = [o.split("=", 1)[1] for o in run if o.lstrip("+").startswith("system")]
    if experiment in ("cpu_2wiki", "demo_2wiki"):  # the 2Wiki slice's index would add minutes: their recipe here
        return [*TINY, *ON_MUSIQUE]
    if experiment in ("glm_2wiki_cpu", "glm_prior_2wiki_cpu"):  # the same, on a tiny random MPNet
        return [*TINY_MPNET_GLM, *ON_MUSIQUE]
    return TINY_GLM if experiment.startswith("glm") or any(s.startswith("glm") for s in system) else TINY


def _compose(overrides, return_hydra_config=False):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=return_hydra_config)


def _paths(tmp_path):
    return [f"output_dir={tmp_path / 'out'}", f"checkpoint_dir={tmp_path / 'ckpt'}", f"results_dir={tmp_path / 'res'}"]


def test_experiments_exist():
    assert {"demo", "gfm_rag", "gfm_rag_star", "gfm_rag_plus", "glm_rag", "glm_demo", "glm_linear"} <= set(EXPERIMENTS)
    assert {f"glm_sweep_{s}" for s in ("hops", "triplets", "t5", "aggregation", "interaction", "encoding")} <= set(
        EXPERIMENTS
    )


@pytest.mark.integration  # trains on musique100 (its full index and GNN inputs)
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_runs_fast_dev_run(experiment, glmrag_cache, tmp_path):
    run = first_run(experiment)
    cfg = _compose(
        [f"experiment={experiment}", *run, *tiny(experiment, run), *_paths(tmp_path), "+trainer.fast_dev_run=true"]
    )
    assert cfg.run_name.startswith(cfg.model_name) and cfg.run_name.endswith("-musique100")
    out = run_train(cfg)
    assert out["metrics"]["train/loss"] >= 0.0
    assert out["best_checkpoint"] is None  # a smoke test: no checkpoint is tested or evaluated
    assert out["eval"] is None and out["stored"] == [] and not (tmp_path / "res").exists()


def test_experiment_values_reach_the_model():
    plus = _compose(["experiment=gfm_rag_plus", "output_dir=x"])
    star = _compose(["experiment=gfm_rag_star", "output_dir=x"])
    assert plus.model.gnn.use_node_features and plus.datamodule.node_features and plus.model.gnn.hidden_channels == 512
    assert not star.model.gnn.use_node_features and star.pretrain is None
    assert _compose(["experiment=gfm_rag", "output_dir=x"]).pretrain.max_epochs == 10  # GFM-RAG stage2_kg_pretrain
    assert (plus.datamodule.batch_size, star.datamodule.batch_size) == (2, 4)  # GLM-RAG App. B
    assert _compose(["output_dir=x"]).datamodule.task == "qa"


@pytest.mark.integration  # trains on musique100 (its full index and GNN inputs)
def test_main_job_trains_tests_and_evaluates_against_ppr(glmrag_cache, tmp_path):
    overrides = ["experiment=demo", "model.gnn.hidden_channels=16", "trainer.max_epochs=2", "retriever@baselines=[ppr]"]
    cfg = _compose([*overrides, "logger=[csv]", "n_boot=200", *_paths(tmp_path)])
    out = run_train(cfg)
    best = Path(out["best_checkpoint"])
    assert best.is_file() and (tmp_path / "ckpt" / "last.ckpt").is_file()
    assert 0.0 <= out["metrics"]["test/recall@2"] <= 1.0
    result = out["eval"]
    assert result.systems == ["gfm_rag_plus_demo-musique100", "untrained", "ppr"]
    # Trainer.test and the evaluator rank the same test questions with the same code
    assert result.overall["gfm_rag_plus_demo-musique100"]["recall@2"].mean == pytest.approx(
        out["metrics"]["test/recall@2"], abs=1e-6
    )
    metrics = json.loads((tmp_path / "out" / "eval" / "metrics.json").read_text())
    assert metrics["reference"] == "gfm_rag_plus_demo-musique100"
    assert (tmp_path / "out" / "csv").is_dir()
    # the results store: the evaluator's metrics.json plus the run and the Trainer's metrics, and the config
    assert out["stored"] == [tmp_path / "res" / "gfm_rag_plus_demo-musique100"]
    stored = json.loads((out["stored"][0] / "metrics.json").read_text())
    assert {k: stored[k] for k in metrics if k != "settings"} == {k: v for k, v in metrics.items() if k != "settings"}
    assert stored["trainer"]["test/recall@2"] == pytest.approx(out["metrics"]["test/recall@2"])
    run = stored["run"]
    assert run["num_parameters"] == sum(p.numel() for p in load_gnn(best).parameters()) > 0
    assert (run["study"], run["family"], run["eval_data"]) == ("adhoc", "gfm_rag_plus_demo", "musique100")
    assert run["settings"]["model.gnn.hidden_channels"] == 16 and run["settings"]["model.subgraph.max_triplets"] is None
    assert OmegaConf.load(out["stored"][0] / "config.yaml").model.gnn.hidden_channels == 16


@pytest.mark.integration  # trains on musique100 (its full index and GNN inputs)
def test_glm_trains_tests_and_evaluates_like_the_gnn(glmrag_cache, tmp_path):
    overrides = ["experiment=glm_demo", "trainer.max_epochs=1", "retriever@baselines=[ppr]", "data.limit=12"]
    cfg = _compose([*overrides, "model.subgraph.max_triplets=40", "logger=[csv]", "n_boot=100", *_paths(tmp_path)])
    assert cfg.datamodule.tokenizer == cfg.model.glm.tokenizer
    out = run_train(cfg)
    result = out["eval"]
    assert result.systems == ["glm_demo-musique100", "untrained", "ppr"]
    # The GLM checkpoint retriever rebuilds the subgraphs and ranks as Trainer.test did.
    assert result.overall["glm_demo-musique100"]["recall@2"].mean == pytest.approx(
        out["metrics"]["test/recall@2"], abs=1e-6
    )
    run = json.loads((out["stored"][0] / "metrics.json").read_text())["run"]
    assert run["settings"]["model.subgraph.max_triplets"] == 40
    assert run["settings"]["model.glm.encoder_config"]["d_model"] == 128
    assert "model.gnn.hidden_channels" not in run["settings"] and run["family"] == "glm_demo"


def test_glm_ablation_values_reach_the_model():
    linear = _compose(["experiment=glm_linear", "output_dir=x"])
    assert linear.model.subgraph.layout == "linear" and linear.model.glm.encoder == "t5-base"
    assert _compose(["experiment=glm_local", "output_dir=x"]).model.glm.attention == "local"
    none = _compose(["experiment=glm_no_interaction", "output_dir=x"])
    assert not none.model.subgraph.use_text
    assert not none.model.glm.query_interaction
    hops = ["experiment=glm_rag", "model.subgraph.max_hops=3", "model.subgraph.max_triplets=300", "output_dir=x"]
    hops = _compose(hops)
    assert (hops.model.subgraph.max_hops, hops.model.subgraph.max_triplets) == (3, 300)


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


@pytest.mark.integration  # trains on musique100 (its full index and GNN inputs)
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


@pytest.mark.integration  # trains on musique100 (its full index and GNN inputs)
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


def load_gnn(ckpt):
    return GNNRetrieverModule.load_from_checkpoint(ckpt, map_location="cpu")


def study_runs(study: str, composer=_compose) -> list:
    """Every run of a study's sweep, composed (the Cartesian product of its hydra.sweeper.params) by
    ``composer``: the session's cached ``train_config`` in the tests."""
    params = composer([f"experiment={study}", "output_dir=x"], return_hydra_config=True).hydra.sweeper.params
    grid = [[f"{key}={v}" for v in str(values).split(",")] for key, values in params.items()]
    return [composer([f"experiment={study}", "output_dir=x", *run]) for run in itertools.product(*grid)]


def test_the_paper_studies_exist():
    names = {"in_domain", "transfer", "subgraph_restriction", "capacity_scaling", "data_scaling", "latency"}
    assert {f"study_{n}" for n in names} == set(STUDIES)


@pytest.mark.parametrize("study", STUDIES)
def test_every_study_run_composes_into_one_results_folder(study, train_config):
    runs = study_runs(study, train_config)
    assert len(runs) >= 2
    for cfg in runs:
        assert cfg.study == study.removeprefix("study_") and cfg.results_dir == f"results/{cfg.study}"
        glm = cfg.model._target_.endswith("GLMRetrieverModule")
        assert glm == cfg.family.startswith("glm") == cfg.datamodule._target_.endswith("SubgraphDataModule")
    assert len({c.run_name for c in runs}) == len(runs)  # runs are told apart


def test_study_values_follow_the_paper(train_config):
    restriction = study_runs("study_subgraph_restriction", train_config)  # Table 3
    assert sorted(c.model.subgraph.max_triplets for c in restriction if c.family == "glm_rag") == [300, 400, 500, 600]
    gnn = {c.model_name: c.model.subgraph.max_triplets for c in restriction if c.family == "gfm_rag_star"}
    assert gnn == {"gfm_rag_star": None} | {f"gfm_rag_star_t{t}": t for t in (600, 500, 400, 300)}
    capacity = study_runs("study_capacity_scaling", train_config)  # Table 18 pairs
    pairs = {(c.capacity, c.model.get("gnn", {}).get("hidden_channels") or c.model.glm.encoder) for c in capacity}
    assert {p for p in pairs if p[0] == "small"} == {("small", 1024), ("small", "t5-small")}
    assert {c.model.gnn.hidden_channels for c in capacity if "gnn" in c.model} == {1024, 2048, 4096}
    assert {c.model.glm.encoder for c in capacity if "glm" in c.model} == {"t5-small", "t5-base", "t5-large"}
    assert {c.family for c in capacity} == {"gfm_rag_star", "gfm_rag_plus", "glm_rag"}
    scaling = study_runs("study_data_scaling", train_config)  # Fig. 7
    assert sorted({c.datamodule.train_fraction for c in scaling}) == [0.25, 0.5, 0.75, 1.0]
    assert {c.datamodule.limit for c in scaling} == {None}
    assert {c.data.limit for c in scaling} == {None}  # the evaluator scores the whole test split
    assert [c.pretrain is not None for c in study_runs("study_in_domain", train_config)] == [True, False, False, False]


def test_transfer_study_evaluates_on_other_datasets(train_config):
    runs = study_runs("study_transfer", train_config)  # Table 1
    assert {(c.data.name, c.family) for c in runs} == {
        (d, f) for d in ("musique100", "2wiki_train") for f in ("gfm_rag_star", "gfm_rag_plus", "glm_rag")
    }
    cfg = next(c for c in runs if c.data.name == "musique100")
    assert list(cfg.eval_data) == ["musique100", "2wiki_test"]
    own, other = evaluation_config(cfg, "best.ckpt"), evaluation_config(cfg, "best.ckpt", "2wiki_test")
    assert (own.data.name, own.index.extractor, own.output_dir) == ("musique100", "openie", "x/eval")
    assert (other.data.name, other.data.split, other.index.extractor) == ("2wiki_test", "test", "spacy")
    assert other.output_dir == "x/eval_2wiki_test" and other.reference == cfg.run_name
    with pytest.raises(ValueError, match="not dataset 'toy'"):
        evaluation_config(cfg, "best.ckpt", "toy")


def test_an_unknown_experiment_is_an_error_listing_the_experiments():
    """Issue 25 item 10: every unknown name an error listing the valid ones (before Hydra composes anything)."""
    from glmrag.jobs.cli import unknown_choice_error

    message = unknown_choice_error(["experiment=dmeo", "trainer.max_epochs=1"], "train.py")
    assert message.startswith("train.py: no experiment config named 'dmeo' (in 'experiment=dmeo').")
    assert "Did you mean 'demo'?" in message
    assert f"are: {', '.join(EXPERIMENTS)}." in message and message.endswith("More: python train.py --help")
    assert unknown_choice_error(["experiment=demo", "model=gnn", "logger=[csv,wandb]"], "train.py") is None
