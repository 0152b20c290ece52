"""The modules' typed settings nodes: built from YAML, unknown keys refused, and old flat checkpoints loading."""

from __future__ import annotations

import lightning
import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from glmrag.index.embed import DEFAULT_MODEL
from glmrag.jobs.config_check import ConfigError, validate_train_config
from glmrag.models.checkpointing import (
    HPARAMS_LAYOUT,
    HPARAMS_LAYOUT_KEY,
    CheckpointLayoutError,
    migrate_hparams,
    nest_flat_hparams,
)
from glmrag.models.glm_inputs import SubgraphSettings
from glmrag.models.glm_module import GLM_LOSS, GLMConfig, GLMRetrieverModule, LearningRates
from glmrag.models.gnn_module import GNNRetrieverModule, KGCSettings
from glmrag.models.retriever_module import Evaluation, LossWeights
from glmrag.nn.gnn import GNNConfig
from glmrag.retrievers.gnn_checkpoint import named_models

T5_TINY = {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_heads": 2, "d_kv": 8}

# Hyper-parameters exactly as the modules saved them before the settings nodes (recorded from
# GNNRetrieverModule(hidden_channels=8, num_layers=2, question_dim=16, relation_dim=16, node_dim=16,
# use_node_features=True, max_triplets=30, ks=[1, 2, 5]).hparams and GLMRetrieverModule(t5_config=T5_TINY,
# tokenizer="offline:all-MiniLM-L6-v2", question_dim=16, max_triplets=30, ks=[1, 2]).hparams on commit 97c9c12).
FLAT_GNN = {
    "hidden_channels": 8,
    "num_layers": 2,
    "question_dim": 16,
    "relation_dim": 16,
    "node_dim": 16,
    "use_node_features": True,
    "query_injection": "all",
    "dropout": 0.0,
    "aggregation": "fused",
    "max_hops": 2,
    "max_triplets": 30,
    "subgraph_seed": 0,
    "bce_weight": 0.3,
    "listce_weight": 0.7,
    "temperature": 0.2,
    "stage": "qa",
    "num_negatives": 256,
    "adversarial_temperature": 1.0,
    "hide_target_edges": True,
    "ks": (1, 2, 5),
    "ranker": "idf_topk",
    "top_entities": 20,
    "embed_model": "offline:all-MiniLM-L6-v2",
    "init_from": None,
}
FLAT_GLM = {
    "t5": "t5-base",
    "t5_config": dict(T5_TINY),
    "tokenizer": "offline:all-MiniLM-L6-v2",
    "attention": "global",
    "aggregation": "mean",
    "query_interaction": True,
    "question_dim": 16,
    "backend": "eager",
    "gradient_checkpointing": False,
    "max_hops": 2,
    "max_triplets": 30,
    "layout": "graph",
    "use_text": True,
    "position_mode": "triple",
    "subgraph_seed": 0,
    "position_conflict": "last",
    "question_eos": True,
    "listce_weight": 0.56,
    "bce_weight": 0.44,
    "temperature": 0.2,
    "head_lr": 0.0005,
    "backbone_lr": 0.0001,
    "bucket_lr": "backbone",
    "ks": (1, 2),
    "ranker": "idf_topk",
    "top_entities": 20,
    "embed_model": "offline:all-MiniLM-L6-v2",
}
GNN_DIMS = {"hidden_channels": 8, "num_layers": 2, "question_dim": 16, "relation_dim": 16, "node_dim": 16}


def save(module: torch.nn.Module, hparams: dict, path) -> None:
    """A checkpoint as Lightning writes one, with ``hparams`` as its hyper-parameters."""
    ckpt = {"state_dict": module.state_dict(), "hyper_parameters": hparams}
    torch.save(ckpt | {"pytorch-lightning_version": lightning.__version__}, path)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    theirs = b.state_dict()
    return a.state_dict().keys() == theirs.keys() and all(torch.equal(v, theirs[k]) for k, v in a.state_dict().items())


def tiny_glm(**settings) -> GLMRetrieverModule:
    torch.manual_seed(0)
    glm = {"t5_config": T5_TINY, "tokenizer": DEFAULT_MODEL, "question_dim": 16}
    return GLMRetrieverModule(glm=glm, **({"subgraph": {"max_triplets": 30}} | settings))


# -- settings nodes --


def test_the_gnn_gets_dataclasses_from_mappings_and_saves_them_whole():
    node = OmegaConf.create({"hidden_channels": 8, "num_layers": 2})  # a DictConfig, as Hydra hands it over
    module = GNNRetrieverModule(gnn=node, subgraph={"max_triplets": 30, "seed": 4}, kgc={"num_negatives": 32})
    assert module.config == GNNConfig(hidden_channels=8, num_layers=2)
    assert module.subgraph_settings == SubgraphSettings(max_triplets=30, seed=4)
    assert (module.loss_weights, module.kgc) == (LossWeights(), KGCSettings(num_negatives=32))
    assert module.hparams.gnn["hidden_channels"] == 8 and module.hparams.gnn["aggregation"] == "fused"
    assert module.hparams.subgraph == {"max_hops": 2, "max_triplets": 30, "seed": 4}
    assert module.hparams.evaluation == {"ks": (1, 2, 5, 10), "ranker": "idf_topk", "top_entities": 20}
    assert GNNRetrieverModule(gnn=GNN_DIMS, subgraph={"max_triplets": None}).subgraph_settings is None


def test_the_glm_gets_dataclasses_and_its_own_loss_defaults():
    module = tiny_glm(loss={"temperature": 0.5}, lr=LearningRates(head=1e-3))
    assert module.config == GLMConfig(t5_config=T5_TINY, tokenizer=DEFAULT_MODEL, question_dim=16)
    assert module.settings == SubgraphSettings(max_triplets=30)
    # a partial loss node keeps the GLM's weights (App. B), not GFM-RAG's
    assert module.loss_weights == LossWeights(bce_weight=0.44, listce_weight=0.56, temperature=0.5)
    assert tiny_glm().loss_weights == GLM_LOSS
    groups = {g["name"]: g["lr"] for g in module.parameter_groups()}
    assert groups == {"backbone": 1e-4, "head": 1e-3}
    assert GLMConfig(t5="t5-small").tokenizer == "t5-small"  # the T5's own tokenizer by default


def test_a_priors_two_scalars_train_at_lr_prior_when_it_is_set():
    prior = {"kind": "ppr", "dense_weight": 10.0}
    by_name = {}  # lr.prior -> group name -> (lr, parameter names)
    for lr in (None, 5e-3):
        module = tiny_glm(prior=prior, lr={"prior": lr})
        names = {id(p): name for name, p in module.named_parameters()}
        groups = module.parameter_groups()
        by_name[lr] = {g["name"]: (g["lr"], {names[id(p)] for p in g["params"]}) for g in groups}
    scalars = {"prior.weight", "prior.dense_weight"}
    assert set(by_name[None]) == {"backbone", "head"} and scalars <= by_name[None]["head"][1]  # None: the head's
    assert by_name[5e-3]["prior"] == (5e-3, scalars)  # set: their own group, and nowhere else
    assert not scalars & (by_name[5e-3]["head"][1] | by_name[5e-3]["backbone"][1])
    assert by_name[5e-3]["head"][1] == by_name[None]["head"][1] - scalars
    assert {g["name"] for g in tiny_glm(lr={"prior": 5e-3}).parameter_groups()} == {"backbone", "head"}  # no prior


@pytest.mark.parametrize("value", [-1e-3, float("nan"), float("inf"), "fast", True])
def test_a_learning_rate_that_is_not_a_finite_number_is_refused(value):
    for name in ("head", "backbone", "prior"):
        with pytest.raises(ValueError, match=rf"lr.{name} must be a finite number >= 0"):
            LearningRates(**{name: value})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: GNNRetrieverModule(gnn={"hiden_channels": 8}), r"model.gnn has unknown key\(s\) \['hiden_channels'\]"),
        (lambda: GNNRetrieverModule(subgraph={"layout": "linear"}), r"a GNN reads only max_hops, max_triplets, seed"),
        (
            lambda: GNNRetrieverModule(loss={"bce_weight": -1}),
            r"model.loss.bce_weight=-1: must be a finite number >= 0",
        ),
        (lambda: GNNRetrieverModule(loss={"temperature": 0.0}), r"loss.temperature must be > 0"),
        (
            lambda: GNNRetrieverModule(loss={"bce_weight": 0, "listce_weight": 0}),
            r"listce_weight and passage_weight are all 0",
        ),
        (lambda: tiny_glm(loss={"passage_weight": 1.0}), r"passage_weight scores the fused passage logits of a prior"),
        (lambda: GNNRetrieverModule(prior={"kind": "dense"}), r"prior.kind must be one of"),
        (lambda: GNNRetrieverModule(evaluation={"ks": [1, 5]}), r"evaluation.ks must include 2"),
        (lambda: tiny_glm(lr={"bucket": "head"}), r"model.lr has unknown key\(s\) \['bucket'\]"),
        (lambda: tiny_glm(subgraph={"precompute": True}), r"set datamodule.subgraph.precompute"),
        (lambda: GLMRetrieverModule(glm={"attention": "sparse"}), r"glm.attention must be one of"),
    ],
)
def test_unknown_keys_and_bad_values_are_refused_by_name(build, message):
    with pytest.raises((TypeError, ValueError), match=message):
        build()


# -- configs --


def test_the_yaml_nodes_become_the_modules_dataclasses(train_config):
    cfg = train_config(("experiment=demo", "model.subgraph.max_triplets=40", "output_dir=x"))
    with torch.device("meta"):
        gnn = instantiate(cfg.model)
    assert isinstance(gnn.config, GNNConfig) and (gnn.config.hidden_channels, gnn.config.use_node_features) == (
        64,
        True,
    )
    assert gnn.subgraph_settings == SubgraphSettings(max_triplets=40)
    assert isinstance(gnn.kgc, KGCSettings) and isinstance(gnn.evaluation, Evaluation)
    assert cfg.datamodule.node_features is True  # ${model.gnn.use_node_features}

    cfg = train_config(("experiment=glm_demo", "model.subgraph.layout=linear", "output_dir=x"))
    glm = instantiate(cfg.model)
    assert isinstance(glm.config, GLMConfig) and glm.config.t5_config["d_model"] == 128
    assert glm.settings.layout == "linear" == cfg.datamodule.subgraph.layout  # ${model.subgraph.layout}
    assert glm.learning_rates == LearningRates(head=1e-3, backbone=1e-3)
    assert cfg.datamodule.tokenizer == glm.config.tokenizer == "offline:all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["+model.gnn.hiden=3"], r"model.gnn has unknown key\(s\) \['hiden'\]"),
        (["+model.kgc.negatives=3"], r"model.kgc has unknown key\(s\) \['negatives'\]"),
        (["+model.hidden_channels=8"], r"model.hidden_channels is now model.gnn.hidden_channels"),
        (["experiment=glm_demo", "+model.max_triplets=30"], r"model.max_triplets is now model.subgraph.max_triplets"),
        (["experiment=glm_demo", "+model.subgraph.precompute=true"], r"set datamodule.subgraph.precompute"),
        (["experiment=glm_demo", "model.glm.backend=triton"], r"glm.backend must be one of"),
        (["model.loss.bce_weight=0", "model.loss.listce_weight=0"], r"passage_weight are all 0"),
    ],
)
def test_the_config_check_refuses_bad_nodes_before_any_work(train_config, overrides, message):
    cfg = train_config((*overrides, "output_dir=x"))
    with pytest.raises(ConfigError, match=message):
        validate_train_config(cfg)
    if "hiden" in overrides[0]:  # the module itself refuses it too (a Python user, or no config check)
        with pytest.raises(InstantiationException, match=r"model.gnn has unknown key\(s\) \['hiden'\]"):
            instantiate(cfg.model)


# -- checkpoints --


def test_a_nested_checkpoint_round_trips(tmp_path):
    module = GNNRetrieverModule(gnn=GNN_DIMS, subgraph={"max_triplets": 30}, evaluation={"ks": [1, 2, 5]})
    save(module, dict(module.hparams), tmp_path / "new.ckpt")
    torch.load(tmp_path / "new.ckpt", weights_only=True)  # plain values only
    loaded = GNNRetrieverModule.load_from_checkpoint(tmp_path / "new.ckpt")
    assert loaded.hparams == module.hparams and loaded.config == module.config and same_weights(loaded, module)


def test_a_flat_gnn_checkpoint_loads_with_its_settings(tmp_path):
    torch.manual_seed(0)
    trained = GNNRetrieverModule(
        gnn=GNN_DIMS | {"use_node_features": True}, subgraph={"max_triplets": 30}, evaluation={"ks": [1, 2, 5]}
    )
    save(trained, FLAT_GNN, tmp_path / "old.ckpt")
    loaded = GNNRetrieverModule.load_from_checkpoint(tmp_path / "old.ckpt")
    assert loaded.config == GNNConfig(**GNN_DIMS, use_node_features=True)
    assert loaded.subgraph_settings == SubgraphSettings(max_hops=2, max_triplets=30, seed=0)
    assert loaded.evaluation.ks == (1, 2, 5) and loaded.hparams == trained.hparams
    assert same_weights(loaded, trained)
    # saved before the subgraph restriction existed: the whole KG, as it was trained
    before = {k: v for k, v in FLAT_GNN.items() if k not in ("max_hops", "max_triplets", "subgraph_seed")}
    save(trained, before, tmp_path / "older.ckpt")
    assert GNNRetrieverModule.load_from_checkpoint(tmp_path / "older.ckpt").subgraph_settings is None


def test_a_flat_glm_checkpoint_loads_with_its_settings_and_rules(tmp_path):
    trained = tiny_glm(evaluation={"ks": [1, 2]})
    save(trained, FLAT_GLM, tmp_path / "old.ckpt")
    loaded = GLMRetrieverModule.load_from_checkpoint(tmp_path / "old.ckpt")
    assert loaded.hparams == trained.hparams and loaded.config == trained.config and same_weights(loaded, trained)
    assert loaded.settings == SubgraphSettings(max_triplets=30) and loaded.loss_weights == GLM_LOSS
    # older still: before position_conflict / question_eos / bucket_lr, trained with glmrag's earlier rules
    before = {k: v for k, v in FLAT_GLM.items() if k not in ("position_conflict", "question_eos", "bucket_lr")}
    save(trained, before, tmp_path / "older.ckpt")
    older = GLMRetrieverModule.load_from_checkpoint(tmp_path / "older.ckpt")
    assert (older.settings.position_conflict, older.settings.question_eos) == ("nearest", False)
    assert older.learning_rates.buckets == "head"


def test_nest_flat_hparams_and_the_models_a_checkpoint_names():
    nested = nest_flat_hparams(FLAT_GLM, GLMRetrieverModule.FLAT_HPARAMS)
    assert set(nested) == {"glm", "subgraph", "loss", "lr", "evaluation", "embed_model"}
    assert nested["lr"] == {"head": 0.0005, "backbone": 0.0001, "buckets": "backbone"}
    assert nested["subgraph"]["seed"] == 0 and "subgraph_seed" not in nested["subgraph"]
    expected = {"embed_model": "offline:all-MiniLM-L6-v2", "glm.t5": "t5-base", "glm.tokenizer": DEFAULT_MODEL}
    assert named_models(FLAT_GLM) == named_models(nested) == expected


def test_every_earlier_layout_migrates_one_versioned_step_at_a_time():
    paths, defaults = GLMRetrieverModule.FLAT_HPARAMS, GLMRetrieverModule.FLAT_DEFAULTS
    nested = nest_flat_hparams(FLAT_GLM, paths, defaults)
    assert migrate_hparams(FLAT_GLM, None, paths, defaults) == (nested, 1)  # flat, saved before the layout key
    assert migrate_hparams(FLAT_GLM, 1, paths, defaults) == (nested, 1)
    assert migrate_hparams(FLAT_GLM, 2, paths, defaults) == (nested, 1)  # flat keys under today's key: by hand
    assert migrate_hparams(nested, None, paths, defaults) == (nested, 2)  # nested, saved before the layout key
    assert migrate_hparams(nested, HPARAMS_LAYOUT, paths, defaults) == (nested, HPARAMS_LAYOUT)
    for newer in (HPARAMS_LAYOUT + 1, 0, "2", True):
        with pytest.raises(CheckpointLayoutError, match=rf"layout {newer!r}; this glmrag reads layouts 1 to 2"):
            migrate_hparams(nested, newer, paths, defaults)


def test_checkpoints_record_their_layout_and_a_newer_one_is_refused_by_name(tmp_path):
    module = GNNRetrieverModule(gnn=GNN_DIMS, subgraph={"max_triplets": 30})
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint[HPARAMS_LAYOUT_KEY] == HPARAMS_LAYOUT == 2
    save(module, dict(module.hparams), tmp_path / "now.ckpt")
    ckpt = torch.load(tmp_path / "now.ckpt", weights_only=True)
    torch.save(ckpt | checkpoint, tmp_path / "now.ckpt")
    assert GNNRetrieverModule.load_from_checkpoint(tmp_path / "now.ckpt").hparams == module.hparams
    torch.save(ckpt | {HPARAMS_LAYOUT_KEY: 3}, tmp_path / "future.ckpt")
    with pytest.raises(CheckpointLayoutError, match="load it with the glmrag version that saved it"):
        GNNRetrieverModule.load_from_checkpoint(tmp_path / "future.ckpt")
    torch.save(ckpt | {"hyper_parameters": FLAT_GNN, HPARAMS_LAYOUT_KEY: 1}, tmp_path / "flat.ckpt")
    loaded = GNNRetrieverModule.load_from_checkpoint(tmp_path / "flat.ckpt")  # layout 1 saved with its key
    assert loaded.config == GNNConfig(**GNN_DIMS, use_node_features=True) and same_weights(loaded, module)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5, "0.3", True])
def test_a_loss_weight_that_is_not_a_finite_number_at_least_zero_is_refused(value):
    with pytest.raises(ValueError, match=r"model.loss.bce_weight=.*: must be a finite number >= 0"):
        GNNRetrieverModule(loss={"bce_weight": value})
