"""The settings nodes of ``configs/model/*.yaml`` as Hydra structured configs: composition itself refuses a key
that is not a field, or a value of the wrong type, with Hydra's own message.

Each node's schema is a plain twin of its settings dataclass: the same fields, types and defaults (the module's
defaults where they differ, as the GLM's loss weights), so composing fills in what the module would fill in. The
twins are not the dataclasses themselves: those are frozen, and a frozen structured config makes read-only
nodes that no experiment or command line could override. The range rules stay on the dataclasses, written
once (:mod:`glmrag.jobs.config_check` runs them before anything heavy).

Hydra's ConfigStore holds the twins as the group ``schema`` (``schema/gnn``, ``schema/glm``, ...), which
``configs/model/gnn.yaml`` and ``glm.yaml`` put under their nodes in their defaults lists. Importing
:mod:`glmrag.jobs.config_path`, which every composition of glmrag's configs does to find them, registers them.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from glmrag.models.glm_inputs import SubgraphSettings
from glmrag.models.glm_module import GLM_LOSS, SUBGRAPH_FIELDS, GLMConfig, LearningRates
from glmrag.models.gnn_module import GNN_SUBGRAPH_FIELDS, KGCSettings
from glmrag.models.retriever_module import Evaluation, LossWeights
from glmrag.nn.gnn import GNNConfig

GROUP = "schema"
"""The ConfigStore group of the schemas: ``configs/model/gnn.yaml`` lists ``/schema@gnn: gnn``."""


def hydra_type(hint: Any) -> Any:
    """``hint`` as OmegaConf spells it: ``X | None`` is ``Optional[X]``, ``tuple[int, ...]`` a ``Tuple``, a dict
    any value."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return Optional[hydra_type(rest[0])]  # noqa: UP045 (OmegaConf reads typing's Optional)
        return Any
    if origin is tuple:
        return typing.Tuple[tuple(hydra_type(a) if a is not Ellipsis else a for a in args)]  # noqa: UP006
    if origin is dict:  # free-form (a T5Config's fields): the module checks it; a typed dict would resolve
        return Any  # an interpolation such as ${capacity_pairs.${capacity}.t5_config} while composing
    return hint


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
    "glm_subgraph": schema_of(SubgraphSettings, "GLMSubgraphSchema", only=SUBGRAPH_FIELDS),
    "lr": schema_of(LearningRates, "LearningRatesSchema"),
}
"""``schema/<name>`` in the ConfigStore: the schema of each settings node of the model configs."""


def register() -> None:
    """Store :data:`SCHEMAS` in Hydra's ConfigStore (again is harmless: the same nodes replace themselves)."""
    store = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        store.store(group=GROUP, name=name, node=schema)
