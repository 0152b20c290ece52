"""The model configs' settings nodes are Hydra structured configs (``glmrag/jobs/schemas.py``): composition itself
refuses a key that is not a field or a value of the wrong type, with Hydra's message naming the key; a settings
node is typed by the module's own settings dataclass, so composing fills in exactly what the module would."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from glmrag.datamodules.kg_datamodule import QuestionSettings
from glmrag.io import plain_container
from glmrag.jobs.schemas import NODE_SCHEMAS
from glmrag.models.glm_module import GLMRetrieverModule
from glmrag.models.gnn_module import GNNRetrieverModule

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

REFUSED = [
    ("experiment=demo", "model.gnn.hiden_channels=8", r"Key 'hiden_channels' not in 'GNNConfig'"),
    (
        "experiment=demo",
        "model.gnn.hidden_channels=wide",
        r"Value 'wide' of type 'str' could not be converted to Integer",
    ),
    ("experiment=demo", "model.gnn.use_node_features=maybe", r"Value 'maybe' is not a valid bool"),
    ("experiment=demo", "model.loss.bce_weigth=0.5", r"Key 'bce_weigth' not in 'LossWeights'"),
    ("experiment=demo", "model.kgc.num_negatives=many", r"could not be converted to Integer"),
    ("experiment=demo", "model.evaluation.ks=[1,two]", r"Value 'two' of type 'str' could not be converted to Integer"),
    ("experiment=demo", "model.subgraph.layout=linear", r"Key 'layout' not in 'GNNSubgraph'"),
    ("experiment=glm_demo", "model.glm.t5_confg={}", r"Key 't5_confg' not in 'GLMConfig'"),
    ("experiment=glm_demo", "model.lr.head=fast", r"Value 'fast' of type 'str' could not be converted to Float"),
    ("experiment=glm_demo", "model.subgraph.max_triplets=null", r"field 'model.subgraph.max_triplets' is not Optional"),
    ("experiment=glm_demo", "model.subgraph.precompute=true", r"Key 'precompute' not in 'SubgraphSettings'"),
    ("experiment=demo", "model.stag=kgc", r"Key 'stag' not in 'GNNModuleConfig'"),
    ("experiment=glm_demo", "model.embed_modle=x", r"Key 'embed_modle' not in 'GLMModuleConfig'"),
    ("experiment=demo", "datamodule.batch_size=abc", r"Value 'abc' of type 'str' could not be converted to Integer"),
    ("experiment=demo", "datamodule.batchsize=3", r"Key 'batchsize' not in 'KGQADataModuleConfig'"),
    (
        "experiment=demo",
        "datamodule.train_fraction=half",
        r"Value 'half' of type 'str' could not be converted",
    ),
    ("experiment=glm_demo", "datamodule.shard_sise=8", r"Key 'shard_sise' not in 'SubgraphDataModuleConfig'"),
    ("experiment=glm_demo", "datamodule.subgraph={max_hops: 2}", r"Key 'subgraph' not in 'SubgraphDataModuleConfig'"),
    ("experiment=glm_demo", "datamodule.precompute=maybe", r"Value 'maybe' is not a valid bool"),
]


@pytest.mark.parametrize(("experiment", "override", "message"), REFUSED, ids=[c[1] for c in REFUSED])
def test_composition_refuses_an_unknown_key_or_a_wrong_type(experiment, override, message, train_config):
    with pytest.raises(ConfigCompositionException) as refused:
        train_config([experiment, override])
    text = f"{refused.value}\n{refused.value.__cause__}"  # Hydra's message, then OmegaConf's it wraps
    assert re.search(message, text), text
    assert f"full_key: {override.split('=')[0]}" in text  # the key, spelled as the override spells it


def test_values_of_the_right_type_are_converted_and_kept(train_config):
    cfg = train_config(
        ["experiment=demo", "model.gnn.hidden_channels=32", "model.loss.bce_weight=1", "model.gnn.dropout=0"]
    )
    assert cfg.model.gnn.hidden_channels == 32 and cfg.model.loss.bce_weight == 1.0
    assert isinstance(cfg.model.loss.bce_weight, float) and isinstance(cfg.model.gnn.dropout, float)
    glm = train_config(["experiment=glm_demo", "model.glm.frozen_layers=2"])
    assert glm.model.glm.frozen_layers == 2 and glm.model.glm.encoder_config["d_model"] == 128  # a free-form dict


@pytest.mark.parametrize(("name", "module"), [("model/gnn", GNNRetrieverModule), ("model/glm", GLMRetrieverModule)])
def test_each_settings_node_fills_in_what_the_module_would(name, module):
    """A settings node left empty composes to its dataclass's defaults, which the module reads as its own."""
    schema = OmegaConf.structured(NODE_SCHEMAS[name])
    for node, convert in module.SETTINGS.items():
        filled = OmegaConf.to_container(schema[node]) if schema[node] is not None else None
        assert convert(filled) == convert(None), node


@pytest.mark.parametrize("name", sorted(NODE_SCHEMAS))
def test_each_node_schema_has_a_field_per_constructor_argument(name):
    """A node's fields are its class's arguments, with their defaults (a DataModule's ``**questions``: the fields
    of QuestionSettings; ``kgs``, and a SubgraphDataModule's ``subgraph``, are passed by the jobs): an argument
    added to a constructor and not here would be refused by composition."""
    schema = NODE_SCHEMAS[name]
    parameters = inspect.signature(get_class(schema._target_).__init__).parameters
    passed = {"self", "kgs", "questions"} | ({"subgraph"} if name == "datamodule/subgraph" else set())
    arguments = {key: p.default for key, p in parameters.items() if key not in passed}
    if name.startswith("datamodule/"):
        arguments |= {f.name: f.default for f in dataclasses.fields(QuestionSettings)}
    fields = {f.name: f.default for f in dataclasses.fields(schema) if f.name != "_target_"}
    assert set(fields) == set(arguments)
    for key, default in arguments.items():
        if default is not inspect.Parameter.empty and fields[key] is not dataclasses.MISSING:
            assert fields[key] == default, key


def test_every_model_config_types_its_settings_nodes(train_config):
    """Both model configs put its dataclass under each settings node (a node without one would go unchecked)."""
    for experiment, module in (("experiment=demo", GNNRetrieverModule), ("experiment=glm_demo", GLMRetrieverModule)):
        cfg = train_config([experiment])
        for node, convert in module.SETTINGS.items():
            if node != "prior":  # free-form (module docstring of glmrag.jobs.schemas)
                assert OmegaConf.get_type(cfg.model, node) is type(convert(None)), (experiment, node)


HPARAMS_OF_NODE = ("_target_", "optimizer", "scheduler")
"""Keys of a model node that are not hyper-parameters: the class, and the factories a checkpoint cannot hold."""


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=demo_prior"],
        ["experiment=demo", "model.subgraph.max_triplets=300"],
        ["experiment=gfm_rag"],
        ["experiment=glm_demo"],
    ],
    ids=["demo_prior", "gnn_subgraph", "gfm_rag", "glm_demo"],
)
def test_a_modules_hyper_parameters_are_its_config_node(overrides, train_config):
    """What a checkpoint saves as hyper-parameters is the composed ``model`` node itself (its settings nodes
    complete, thanks to the schemas), less the class and the optimizer and scheduler factories."""
    cfg = train_config(overrides)
    node = {k: v for k, v in plain_container(cfg.model).items() if k not in HPARAMS_OF_NODE}
    module = get_class(cfg.model._target_)(**node)
    assert plain_container(dict(module.hparams)) == node


@pytest.mark.integration  # builds every experiment's nodes (4 s); the override cases stay quick
def test_every_experiment_types_its_model_and_datamodule_nodes(train_config):
    """Each config of ``configs/experiment`` composes its ``model`` and ``datamodule`` as the schema of the class
    it instantiates: no key outside the constructor's arguments, no value of another type."""
    by_target = {schema._target_: schema for schema in NODE_SCHEMAS.values()}
    for experiment in sorted(CONFIGS.glob("experiment/*.yaml")):
        cfg = train_config([f"experiment={experiment.stem}"])
        for node in ("model", "datamodule"):
            assert OmegaConf.get_type(cfg, node) is by_target[cfg[node]._target_], (experiment.stem, node)


@pytest.mark.parametrize("name", ["datamodule/kgqa", "datamodule/subgraph"])
def test_a_datamodule_schema_fills_in_the_constructors_defaults(name):
    """A DataModule node that sets only what has no default builds the DataModule that Python's defaults build."""
    node = OmegaConf.structured(NODE_SCHEMAS[name])
    node.datasets, node.index = ["toy"], {"embed_model": "offline:all-MiniLM-L6-v2"}
    built = instantiate(node)
    assert dict(built.hparams) == dict(get_class(node._target_)(datasets=["toy"], index=dict(node.index)).hparams)


def test_the_gnn_schema_fills_in_the_modules_defaults():
    with torch.device("meta"):
        built = instantiate(OmegaConf.structured(NODE_SCHEMAS["model/gnn"]))
        assert dict(built.hparams) == dict(GNNRetrieverModule().hparams)


@pytest.mark.parametrize("system", sorted(p.stem for p in (CONFIGS / "system" / "scaling_cpu").glob("*.yaml")))
def test_the_cpu_data_scaling_systems_pass_the_training_check(system, train_config):
    """benchmarks/scaling_cpu.sh's runs (issue 52): each family composes into the study and passes the checks that
    run before any work, its own family named, tested on the two 2Wiki test sets, on a nested share of questions."""
    from glmrag.jobs.config_check import validate_train_config

    overrides = ["experiment=study_data_scaling", f"+system=scaling_cpu/{system}", "datamodule.train_fraction=0.125"]
    cfg = train_config([*overrides, "study=data_scaling_cpu"])
    validate_train_config(cfg)
    assert list(cfg.eval_data) == ["2wiki_dev", "2wiki_train"] and cfg.datamodule.train_fraction == 0.125
    assert cfg.results_dir == "results/data_scaling_cpu" and cfg.run_name == f"{cfg.model_name}-f0.125-2wiki_train"
    assert cfg.family == {"glm_mpnet": "glm_mpnet_cpu", "gnn_prior": "ppr_gnn_cpu"}.get(system, "gfm_rag_star_cpu")


@pytest.mark.parametrize(
    ("swept", "name"),
    [("model.glm.frozen_layers=0", "frozen0"), ("model.subgraph.max_triplets=200", "t200")],
)
def test_the_cpu_capacity_and_coverage_runs_pass_the_training_check(swept, name, train_config):
    """STUDY=capacity / coverage of benchmarks/scaling_cpu.sh: the GLM at 360 questions with every layer trained or
    200 triplets passes the checks before any work, named by the value it varies (its own run folder)."""
    from glmrag.jobs.config_check import validate_train_config

    tag = {"frozen0": "frozen${model.glm.frozen_layers}", "t200": "t${model.subgraph.max_triplets}"}[name]
    overrides = ["experiment=study_data_scaling", "+system=scaling_cpu/glm_mpnet", "datamodule.train_fraction=1.0"]
    cfg = train_config([*overrides, swept, f"run_name=glm_mpnet_cpu-{tag}-${{data.name}}", "study=capacity_cpu"])
    validate_train_config(cfg)
    assert cfg.run_name == f"glm_mpnet_cpu-{name}-2wiki_train" and cfg.family == "glm_mpnet_cpu"
