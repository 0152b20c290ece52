"""The ``model`` and ``datamodule`` nodes of glmrag's configs as Hydra structured configs: composition itself
refuses a key that is not a field, or a value of the wrong type, with Hydra's own message.

Each settings node is typed by its settings dataclass itself (``model.gnn`` by :class:`GNNConfig`,
``model.loss`` by :class:`LossWeights`, ...), so composing fills in exactly what the module would. A whole
node is a dataclass here with a field per argument of the class it instantiates (``_target_`` first); a
DataModule's ``**questions`` are the fields of :class:`QuestionSettings`, which its node extends.
``tests/test_config_schemas.py`` checks each node's fields against its constructor. The range rules stay on
the dataclasses and constructors, written once (:mod:`glmrag.jobs.config_check` runs them before any work).

``model.prior`` stays free-form: null by default, it would be an ``Optional`` node, and OmegaConf 2.3 cannot
merge a command line's ``model.prior={kind: ppr}`` into a typed null node (omry/omegaconf#1360; fixed in
OmegaConf 2.4.0, which Hydra 1.3 does not accept: it requires omegaconf<2.4). The module's conversion refuses
its unknown keys, in the config check before any work.

Hydra's ConfigStore holds the node schemas as the groups ``schema/model`` (``gnn``, ``glm``) and
``schema/datamodule`` (``kgqa``, ``subgraph``), which each ``configs/model/*.yaml`` and
``configs/datamodule/*.yaml`` lists first in its defaults (``/schema/model@_here_: gnn``). Importing
:mod:`glmrag.jobs.config_path`, which every composition of glmrag's configs does to find them, registers them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from glmrag.datamodules.glm_inputs import SubgraphSettings
from glmrag.datamodules.kg_datamodule import QuestionSettings
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.models.glm_module import GLMConfig, GLMLossWeights, LearningRates
from glmrag.models.gnn_module import GNNSubgraph, KGCSettings
from glmrag.models.retriever_module import Evaluation, LossWeights
from glmrag.nn.gnn import GNNConfig

GROUP = "schema"
"""The ConfigStore group of the schemas: ``configs/model/gnn.yaml`` lists ``/schema/model@_here_: gnn``."""


@dataclass
class RetrieverModuleConfig:
    """The arguments both retriever modules take (:class:`~glmrag.models.retriever_module.RetrieverModule`)."""

    _target_: str = MISSING  # first in a composed node; each module's config sets it
    evaluation: Evaluation = field(default_factory=Evaluation)
    prior: Any = None
    embed_model: str = DEFAULT_MODEL
    optimizer: Any = None
    scheduler: Any = None


@dataclass
class GNNModuleConfig(RetrieverModuleConfig):
    """``model`` of a GNN retriever: the arguments of :class:`~glmrag.models.gnn_module.GNNRetrieverModule`."""

    _target_: str = "glmrag.models.gnn_module.GNNRetrieverModule"
    gnn: GNNConfig = field(default_factory=GNNConfig)
    subgraph: GNNSubgraph = field(default_factory=GNNSubgraph)
    loss: LossWeights = field(default_factory=LossWeights)
    kgc: KGCSettings = field(default_factory=KGCSettings)
    stage: str = "qa"
    init_from: Optional[str] = None  # noqa: UP045 (OmegaConf reads typing's Optional)


@dataclass
class GLMModuleConfig(RetrieverModuleConfig):
    """``model`` of the GLM retriever: the arguments of :class:`~glmrag.models.glm_module.GLMRetrieverModule`."""

    _target_: str = "glmrag.models.glm_module.GLMRetrieverModule"
    glm: GLMConfig = field(default_factory=GLMConfig)
    subgraph: SubgraphSettings = field(default_factory=SubgraphSettings)
    loss: GLMLossWeights = field(default_factory=GLMLossWeights)
    lr: LearningRates = field(default_factory=LearningRates)


@dataclass
class KGQADataModuleConfig(QuestionSettings):
    """``datamodule`` of a GNN: the arguments of :class:`~glmrag.datamodules.gnn_datamodule.KGQADataModule`."""

    _target_: str = "glmrag.datamodules.gnn_datamodule.KGQADataModule"
    datasets: Any = MISSING
    index: Any = MISSING
    batch_size: int = 4
    num_workers: int = 0
    node_features: bool = False
    task: str = "qa"
    inputs_cache_dir: Optional[str] = None  # noqa: UP045
    store: str = "memory"
    records_dir: Optional[str] = None  # noqa: UP045
    records_url: Optional[str] = None  # noqa: UP045
    storage_options: Any = None
    chunk_size: int = 256
    write_workers: int = 1


@dataclass
class SubgraphDataModuleConfig(QuestionSettings):
    """``datamodule`` of the GLM: the arguments of :class:`~glmrag.datamodules.subgraph_data.SubgraphDataModule`
    but ``subgraph``, which jobs pass from ``model.subgraph``."""

    _target_: str = "glmrag.datamodules.subgraph_data.SubgraphDataModule"
    datasets: Any = MISSING
    index: Any = MISSING
    batch_size: int = 2
    num_workers: Optional[int] = None  # noqa: UP045
    tokenizer: str = DEFAULT_MODEL
    precompute: bool = False
    shard_size: int = 256
    shuffle_buffer: int = 1024
    cache_dir: Optional[str] = None  # noqa: UP045
    records_url: Optional[str] = None  # noqa: UP045
    storage_options: Any = None
    write_workers: int = 1


NODE_SCHEMAS: dict[str, type] = {
    "model/gnn": GNNModuleConfig,
    "model/glm": GLMModuleConfig,
    "datamodule/kgqa": KGQADataModuleConfig,
    "datamodule/subgraph": SubgraphDataModuleConfig,
}
"""``schema/<group>/<name>`` in the ConfigStore: the schema of each ``model`` and ``datamodule`` config."""


def register() -> None:
    """Store :data:`NODE_SCHEMAS` in Hydra's ConfigStore (again is harmless: the same nodes replace themselves)."""
    store = ConfigStore.instance()
    for path, schema in NODE_SCHEMAS.items():
        group, name = path.rsplit("/", 1)
        store.store(group=f"{GROUP}/{group}", name=name, node=schema)
