"""What a retriever module reads besides its batch: the KGs its questions are asked over.

A batch names its KG (``batch["kg"]``) and carries the per-question tensors; the KG-sized objects a step
also needs (the index, the GNN's graph tensors, the passage embeddings of a dense prior term) come from a
:class:`KGSource` given to the module at construction (``GNNRetrieverModule(..., kgs=source)``), never from
``trainer.datamodule``. The DataModules are KG sources (:class:`~glmrag.datamodules.kg_datamodule.KGDataModule`,
:class:`~glmrag.datamodules.gnn_datamodule.KGQADataModule`), so the training job builds the module with
``kgs=datamodule``; a test can give a :class:`StaticKGs` of small indexes and call a step with no Trainer.
The source is not a hyper-parameter: a checkpoint does not hold it, and ``load_from_checkpoint(path,
kgs=source)`` gives it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from glmrag.index.kg import KGIndex
from glmrag.nn.graph_inputs import GraphInputs


@runtime_checkable
class KGSource(Protocol):
    """The KGs of a GLM module: each KG's index and, for a dense prior term, its passage embeddings."""

    def index(self, kg: str) -> KGIndex:
        """The KG index of ``kg``."""
        ...

    def passage_embeddings(self, kg: str) -> torch.Tensor:
        """(P, d) sentence embeddings of ``kg``'s passages in index order, on CPU."""
        ...


@runtime_checkable
class GraphSource(KGSource, Protocol):
    """The KGs of a GNN module: a :class:`KGSource` that also gives each KG's GNN inputs."""

    def graph(self, kg: str) -> GraphInputs:
        """The GNN inputs of ``kg``, on CPU."""
        ...


@dataclass
class StaticKGs:
    """A :class:`GraphSource` of KGs already in memory (tests, notebooks): ``indexes`` by KG name, and for the
    modules that read them, ``graphs`` and ``passage_emb`` by the same names. ``hparams`` are what a
    DataModule's would be for the modules' consistency checks (``embed_model``, ``node_features``, ``task``);
    empty: nothing to check against."""

    indexes: Mapping[str, KGIndex]
    graphs: Mapping[str, GraphInputs] = field(default_factory=dict)
    passage_emb: Mapping[str, torch.Tensor] = field(default_factory=dict)
    hparams: Mapping[str, Any] = field(default_factory=dict)

    def index(self, kg: str) -> KGIndex:
        return self.indexes[kg]

    def graph(self, kg: str) -> GraphInputs:
        return self.graphs[kg]

    def passage_embeddings(self, kg: str) -> torch.Tensor:
        return self.passage_emb[kg]


def source_settings(kgs: object) -> Mapping[str, Any]:
    """The settings a source was built with (a DataModule's ``hparams``), for a module's consistency checks;
    empty for a source without any."""
    return getattr(kgs, "hparams", None) or {}
