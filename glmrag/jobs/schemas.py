"""The ``model`` and ``datamodule`` nodes of glmrag's configs as Hydra structured configs: composition itself
refuses a key that is not a field, or a value of the wrong type, with Hydra's own message.

A node's schema follows what builds it. A settings node (``model.gnn``, ``model.loss``, ...) has a plain twin of
its settings dataclass: the same fields, types and defaults (the module's defaults where they differ, as the
GLM's loss weights), so composing fills in what the module would fill in. A whole ``model`` or ``datamodule``
node has the schema of its class's constructor: a field per argument (``_target_`` first), typed with these
twins where the argument is a settings node, and a DataModule's ``**questions`` are the fields of
:class:`~glmrag.datamodules.kg_datamodule.QuestionSettings`. ``model.prior`` stays free-form: null by default, it
would be an ``Optional`` twin, and OmegaConf 2.3 cannot merge a command line's ``model.prior={kind: ppr}`` into a
typed null node (omry/omegaconf#1360; fixed in OmegaConf 2.4.0, which Hydra 1.3 does not accept: it requires
omegaconf<2.4). The module's conversion refuses its unknown keys, in the config check before any work.

The twins are not the dataclasses themselves: those are frozen, and a frozen structured config makes read-only
nodes that no experiment or command line could override. The range rules stay on the dataclasses and
constructors, written once (:mod:`glmrag.jobs.config_check` runs them before anything heavy).

Hydra's ConfigStore holds the node schemas as the groups ``schema/model`` (``gnn``, ``glm``) and
``schema/datamodule`` (``kgqa``, ``subgraph``), which each ``configs/model/*.yaml`` and
``configs/datamodule/*.yaml`` lists first in its defaults (``/schema/model@_here_: gnn``). Importing
:mod:`glmrag.jobs.config_path`, which every composition of glmrag's configs does to find them, registers them.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from glmrag.datamodules.glm_inputs import MODEL_FIELDS, SubgraphSettings
from glmrag.datamodules.gnn_datamodule import KGQADataModule
from glmrag.datamodules.kg_datamodule import QuestionSettings
from glmrag.datamodules.subgraph_data import SubgraphDataModule
from glmrag.models.glm_module import GLM_LOSS, GLMConfig, GLMRetrieverModule, LearningRates
from glmrag.models.gnn_module import GNN_SUBGRAPH_FIELDS, GNNRetrieverModule, KGCSettings
from glmrag.models.retriever_module import Evaluation, LossWeights
from glmrag.nn.gnn import GNNConfig

GROUP = "schema"
"""The ConfigStore group of the schemas: ``configs/model/gnn.yaml`` lists ``/schema/model@_here_: gnn``."""

PLAIN = (str, int, float, bool)
"""The leaf types OmegaConf checks."""


def hydra_type(hint: Any) -> Any:
    """``hint`` as OmegaConf spells it: ``X | None`` is ``Optional[X]``, ``tuple[int, ...]`` a ``Tuple``; a dict,
    a callable, a union of two types (``Sequence[str] | str``) is any value, which the constructor checks."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        rest = [hydra_type(a) for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2 and rest[0] is not Any:
            return Optional[rest[0]]  # noqa: UP045 (OmegaConf reads typing's Optional)
        return Any
    if origin is tuple:
        return typing.Tuple[tuple(hydra_type(a) if a is not Ellipsis else a for a in args)]  # noqa: UP006
    # A dict is free-form (a T5Config's fields, an index node): a typed dict would resolve an interpolation
    # such as ${capacity_pairs.${capacity}.encoder_config} while composing; the module checks it.
    return hint if hint in PLAIN else Any


def schema_of(
    settings: type,
    name: str,
    only: Iterable[str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    optional: Iterable[str] = (),
) -> type:
    """A plain (not frozen) dataclass twin of the frozen dataclass ``settings``, named ``name``.

    ``only``: the fields a module reads (all when None); ``defaults``: the module's own defaults where they are
    not the dataclass's; ``optional``: fields that may also be null.
    """
    hints = typing.get_type_hints(settings)
    keep = set(only) if only is not None else None
    own = dict(defaults or {})
    specs = []
    for field in dataclasses.fields(settings):
        if keep is not None and field.name not in keep:
            continue
        hint = hydra_type(hints[field.name])
        if field.name in optional:
            hint = Optional[hint]  # noqa: UP045
        default = own.get(field.name, field.default)  # the settings dataclasses have no default factories
        specs.append((field.name, hint, dataclasses.field(default=default)))
    schema = dataclasses.make_dataclass(name, specs)
    schema.__module__ = __name__
    schema.__doc__ = f"The schema of a :class:`{settings.__module__}.{settings.__qualname__}` config node."
    return schema


def constructor_schema(
    cls: type, nodes: Mapping[str, type] | None = None, keywords: type | None = None, passed: Iterable[str] = ("kgs",)
) -> type:
    """The schema of a config node that Hydra instantiates as ``cls``: ``_target_``, then a field per argument
    of ``cls.__init__`` with its default. ``nodes``: the schema of each settings argument; ``keywords``: the
    settings dataclass whose fields ``cls`` takes as its ``**kwargs`` (a DataModule's
    :class:`~glmrag.datamodules.kg_datamodule.QuestionSettings`). ``passed``: the arguments jobs pass at
    instantiation, which no config sets (a module's ``kgs``; a SubgraphDataModule's ``subgraph``, the model's
    node), have no field."""
    nodes = nodes or {}
    hints = typing.get_type_hints(cls.__init__)
    target = f"{cls.__module__}.{cls.__qualname__}"
    specs: list[tuple[str, Any, Any]] = [("_target_", str, dataclasses.field(default=target))]
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or name in passed:
            continue
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            if keywords is not None:
                twin = schema_of(keywords, f"{keywords.__name__}Schema")
                specs += [(f.name, f.type, dataclasses.field(default=f.default)) for f in dataclasses.fields(twin)]
        elif name in nodes:
            specs.append((name, nodes[name], dataclasses.field(default_factory=nodes[name])))
        else:
            default = None if parameter.default is inspect.Parameter.empty else parameter.default
            specs.append((name, hydra_type(hints[name]), dataclasses.field(default=default)))
    schema = dataclasses.make_dataclass(f"{cls.__name__}Schema", specs)
    schema.__module__ = __name__
    schema.__doc__ = f"The schema of a config node that instantiates :class:`{target}`."
    return schema


SCHEMAS: dict[str, type] = {
    "gnn": schema_of(GNNConfig, "GNNSchema"),
    "gnn_subgraph": schema_of(
        SubgraphSettings,
        "GNNSubgraphSchema",
        only=GNN_SUBGRAPH_FIELDS,
        defaults={"max_triplets": None},  # null: the whole KG (GFM-RAG)
        optional=("max_triplets",),
    ),
    "kgc": schema_of(KGCSettings, "KGCSchema"),
    "loss": schema_of(LossWeights, "LossSchema"),
    "glm_loss": schema_of(LossWeights, "GLMLossSchema", defaults=dataclasses.asdict(GLM_LOSS)),
    "evaluation": schema_of(Evaluation, "EvaluationSchema"),
    "glm": schema_of(GLMConfig, "GLMSchema"),
    "glm_subgraph": schema_of(SubgraphSettings, "GLMSubgraphSchema", only=MODEL_FIELDS),
    "lr": schema_of(LearningRates, "LearningRatesSchema"),
}
"""The schema of each settings node, by name."""

NODE_SCHEMAS: dict[str, type] = {
    "model/gnn": constructor_schema(
        GNNRetrieverModule,
        nodes={
            "gnn": SCHEMAS["gnn"],
            "subgraph": SCHEMAS["gnn_subgraph"],
            "kgc": SCHEMAS["kgc"],
            "loss": SCHEMAS["loss"],
            "evaluation": SCHEMAS["evaluation"],
        },
    ),
    "model/glm": constructor_schema(
        GLMRetrieverModule,
        nodes={
            "glm": SCHEMAS["glm"],
            "subgraph": SCHEMAS["glm_subgraph"],
            "loss": SCHEMAS["glm_loss"],
            "lr": SCHEMAS["lr"],
            "evaluation": SCHEMAS["evaluation"],
        },
    ),
    "datamodule/kgqa": constructor_schema(KGQADataModule, keywords=QuestionSettings),
    "datamodule/subgraph": constructor_schema(
        SubgraphDataModule, keywords=QuestionSettings, passed=("kgs", "subgraph")
    ),
}
"""``schema/<group>/<name>`` in the ConfigStore: the schema of each ``model`` and ``datamodule`` config."""


def register() -> None:
    """Store :data:`NODE_SCHEMAS` in Hydra's ConfigStore (again is harmless: the same nodes replace themselves)."""
    store = ConfigStore.instance()
    for path, schema in NODE_SCHEMAS.items():
        group, name = path.rsplit("/", 1)
        store.store(group=f"{GROUP}/{group}", name=name, node=schema)
