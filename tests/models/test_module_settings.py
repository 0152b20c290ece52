"""The modules' typed settings nodes: built from YAML, unknown keys refused, and old flat checkpoints loading."""

from __future__ import annotations

import lightning
import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from glmrag.datamodules.glm_inputs import SubgraphSettings
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.jobs.config_check import ConfigError, validate_train_config
from glmrag.models.checkpointing import (
    HPARAMS_LAYOUT,
    HPARAMS_LAYOUT_KEY,
    CheckpointLayoutError,
)
from glmrag.models.glm_module import GLMConfig, GLMLossWeights, GLMRetrieverModule, LearningRates
from glmrag.models.gnn_module import GNNRetrieverModule, KGCSettings
from glmrag.models.retriever_module import Evaluation, LossWeights
from glmrag.nn.gnn import GNNConfig
from glmrag.retrievers.checkpoint import named_models

T5_TINY = {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_heads": 2, "d_kv": 8}

GNN_DIMS = {"hidden_channels": 8, "num_layers": 2, "question_dim": 16, "relation_dim": 16, "node_dim": 16}


def save(module: torch.nn.Module, hparams: dict, path) -> None:
    """A checkpoint as Lightning writes one, with ``hparams`` as its hyper-parameters."""
    ckpt = {"state_dict": module.state_dict(), "hyper_parameters": hparams, HPARAMS_LAYOUT_KEY: HPARAMS_LAYOUT}
    torch.save(ckpt | {"pytorch-lightning_version": lightning.__version__}, path)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    theirs = b.state_dict()
    return a.state_dict().keys() == theirs.keys() and all(torch.equal(v, theirs[k]) for k, v in a.state_dict().items())


def tiny_glm(**settings) -> GLMRetrieverModule:
    torch.manual_seed(0)
    glm = {"encoder_config": T5_TINY, "tokenizer": DEFAULT_MODEL, "question_dim": 16}
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
    assert module.config == GLMConfig(encoder_config=T5_TINY, tokenizer=DEFAULT_MODEL, question_dim=16)
    assert module.settings == SubgraphSettings(max_triplets=30)
    # a partial loss node keeps the GLM's weights (App. B), not GFM-RAG's
    assert module.loss_weights == GLMLossWeights(temperature=0.5)
    default = tiny_glm().loss_weights
    assert (default.bce_weight, default.listce_weight, default.temperature) == (0.44, 0.56, 0.2)
    groups = {g["name"]: g["lr"] for g in module.parameter_groups()}
    assert groups == {"backbone": 1e-4, "head": 1e-3}
    assert GLMConfig(encoder="t5-small").tokenizer == "t5-small"  # the T5's own tokenizer by default


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
        (
            lambda: GNNRetrieverModule(subgraph={"layout": "linear"}),
            r"model.subgraph has unknown key\(s\) \['layout'\]",
        ),
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
        (lambda: tiny_glm(subgraph={"precompute": True}), r"model.subgraph has unknown key\(s\) \['precompute'\]"),
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
    assert isinstance(glm.config, GLMConfig) and glm.config.encoder_config["d_model"] == 128
    assert glm.settings.layout == "linear" and "subgraph" not in cfg.datamodule  # the model's node alone
    assert glm.learning_rates == LearningRates(head=1e-3, backbone=1e-3)
    assert cfg.datamodule.tokenizer == glm.config.tokenizer == "offline:all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["+model.gnn.hiden=3"], r"model.gnn has unknown key\(s\) \['hiden'\]"),
        (["+model.kgc.negatives=3"], r"model.kgc has unknown key\(s\) \['negatives'\]"),
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


@pytest.mark.parametrize("layout", [None, 2, 4, "3"])
def test_a_checkpoint_of_another_layout_is_refused_by_name(tmp_path, layout):
    module = GNNRetrieverModule(gnn=GNN_DIMS, subgraph={"max_triplets": 30})
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint[HPARAMS_LAYOUT_KEY] == HPARAMS_LAYOUT == 3
    save(module, dict(module.hparams), tmp_path / "other.ckpt")
    ckpt = torch.load(tmp_path / "other.ckpt", weights_only=True)
    torch.save(
        {k: v for k, v in ckpt.items() if k != HPARAMS_LAYOUT_KEY} | {HPARAMS_LAYOUT_KEY: layout},
        tmp_path / "other.ckpt",
    )
    with pytest.raises(CheckpointLayoutError, match=r"other.ckpt: .*layout.*this glmrag reads layout 3 only"):
        GNNRetrieverModule.load_from_checkpoint(tmp_path / "other.ckpt")


def test_the_models_a_checkpoint_names():
    glm = tiny_glm()
    expected = {"embed_model": "offline:all-MiniLM-L6-v2", "glm.encoder": "t5-base", "glm.tokenizer": DEFAULT_MODEL}
    assert named_models(dict(glm.hparams)) == expected


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5, "0.3", True])
def test_a_loss_weight_that_is_not_a_finite_number_at_least_zero_is_refused(value):
    with pytest.raises(ValueError, match=r"model.loss.bce_weight=.*: must be a finite number >= 0"):
        GNNRetrieverModule(loss={"bce_weight": value})
