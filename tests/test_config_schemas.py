"""The model configs' settings nodes are Hydra structured configs (``glmrag/jobs/schemas.py``): composition itself
refuses a key that is not a field or a value of the wrong type, with Hydra's message naming the key; each schema
is its settings dataclass's twin, so composing fills in exactly what the module would."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import get_class
from omegaconf import OmegaConf

from glmrag.io import plain_container
from glmrag.jobs.schemas import SCHEMAS
from glmrag.models.glm_module import GLMRetrieverModule
from glmrag.models.gnn_module import GNNRetrieverModule

REFUSED = [
    ("experiment=demo", "model.gnn.hiden_channels=8", r"Key 'hiden_channels' not in 'GNNSchema'"),
    (
        "experiment=demo",
        "model.gnn.hidden_channels=wide",
        r"Value 'wide' of type 'str' could not be converted to Integer",
    ),
    ("experiment=demo", "model.gnn.use_node_features=maybe", r"Value 'maybe' is not a valid bool"),
    ("experiment=demo", "model.loss.bce_weigth=0.5", r"Key 'bce_weigth' not in 'LossSchema'"),
    ("experiment=demo", "model.kgc.num_negatives=many", r"could not be converted to Integer"),
    ("experiment=demo", "model.evaluation.ks=[1,two]", r"Value 'two' of type 'str' could not be converted to Integer"),
    ("experiment=demo", "model.subgraph.layout=linear", r"Key 'layout' not in 'GNNSubgraphSchema'"),
    ("experiment=glm_demo", "model.glm.t5_confg={}", r"Key 't5_confg' not in 'GLMSchema'"),
    ("experiment=glm_demo", "model.lr.head=fast", r"Value 'fast' of type 'str' could not be converted to Float"),
    ("experiment=glm_demo", "model.subgraph.max_triplets=null", r"field 'model.subgraph.max_triplets' is not Optional"),
    ("experiment=glm_demo", "model.subgraph.precompute=true", r"Key 'precompute' not in 'GLMSubgraphSchema'"),
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
    assert glm.model.glm.frozen_layers == 2 and glm.model.glm.t5_config["d_model"] == 128  # a free-form dict


@pytest.mark.parametrize("module", [GNNRetrieverModule, GLMRetrieverModule])
def test_each_schema_fills_in_what_the_module_would(module):
    """A node left empty composes to the schema's defaults, which the module reads as its own defaults."""
    names = {
        GNNRetrieverModule: {"gnn": "gnn", "subgraph": "gnn_subgraph", "kgc": "kgc", "loss": "loss"},
        GLMRetrieverModule: {"glm": "glm", "subgraph": "glm_subgraph", "loss": "glm_loss", "lr": "lr"},
    }[module]
    names["evaluation"] = "evaluation"
    for node, schema in names.items():
        filled = OmegaConf.to_container(OmegaConf.structured(SCHEMAS[schema]))
        assert module.SETTINGS[node](filled) == module.SETTINGS[node](None), node
        # every field a module reads has a schema key, and no other
        converted = module.SETTINGS[node](None)
        if converted is not None:
            own = {f.name for f in dataclasses.fields(converted)}
            assert set(filled) <= own and (set(filled) == own or schema.endswith("subgraph")), node


def test_every_model_config_types_its_settings_nodes(train_config):
    """Both model configs put a schema under each settings node (a new node without one would go unchecked)."""
    for experiment, nodes in (
        ("experiment=demo", ("gnn", "subgraph", "kgc", "loss", "evaluation")),
        ("experiment=glm_demo", ("glm", "subgraph", "loss", "lr", "evaluation")),
    ):
        cfg = train_config([experiment])
        for node in nodes:
            assert OmegaConf.get_type(cfg.model, node) in SCHEMAS.values(), (experiment, node)


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
