"""GFM-RAG checkpoints in glmrag: the upstream's parameter names and edge direction mapped onto ``QueryGNN``.

GFM-RAG (Luo et al. 2025, github.com/RManLuo/gfm-rag) saves its retriever as ``{"model": state_dict}`` in
``model.pth`` (``gfmrag/utils/util.py``, ``save_model_to_pretrained``) with the entity model's settings in
``config.json["model_config"]["entity_model"]``. Its ``GNNRetriever.forward`` (``gfmrag/models/gfm_rag_v1/
model.py``) and ``QueryNBFNet.bellmanford`` (``gfmrag/models/ultra/models.py``) compute, for questions ``e``
(B, F), relation embeddings ``rel_attr`` (2R, F) and seed weights ``w`` (B, N)::

    q   = question_mlp(e)                                   # (B, H)
    rel = rel_mlp(rel_attr)                                 # (2R, H), shared by the layers
    h0  = w[..., None] * q[:, None]                         # (B, N, H), the boundary
    per layer i (GeneralizedRelationalConv, gfmrag/models/ultra/layers.py):
        r_i = relation_projection(rel)                      # Linear, ReLU, Linear
        a_v = h0_v + sum over edges c with edge_index[0, c] = v of h_{edge_index[1, c]} * r_i[edge_type[c]]
        h   = h + relu(layer_norm(linear([h, a])))          # short_cut
    score = mlp([h, q])                                     # Linear(2H, 2H), ReLU, Linear(2H, 1)

That is glmrag's :class:`~glmrag.nn.gnn.QueryGNN` term for term (same boundary, update, residual and readout
order), with one difference: the **edge direction**. The sum runs in GFM-RAG's C++/CUDA ``rspmm``
(``gfmrag/models/ultra/rspmm/source/rspmm.cpp``, ``rspmm_forward_out_cpu``: ``row = edge_index[0]``,
``col = edge_index[1]``, ``out[row] += relation[type] * input[col]``), which ``GeneralizedRelationalConv.propagate``
calls whenever the edge weights need no gradient, i.e. in training and inference; messages run from
``edge_index[1]`` to ``edge_index[0]``. glmrag sums along ``edge_index[0] -> edge_index[1]`` (PyG's direction).
Both store every triple ``(h, r, t)`` twice, as ``(h, t)`` of type ``r`` and ``(t, h)`` of type ``r + R``
(``graph_index_dataset_v1.py``; :func:`glmrag.nn.graph_inputs.graph_inputs`), so in GFM-RAG the relation
features of ``r`` travel ``t -> h`` and those of ``r + R`` travel ``h -> t``. :func:`gfmrag_graph` flips glmrag's
``edge_index``, which makes glmrag compute GFM-RAG's result. No weight mapping can do it for the released model:
its inverse relations are the sentence embeddings of the texts ``inverse_<r>`` (``inverse_relation_feat: text``,
``gfmrag/workflow/config/gfm_rag/sft_training.yaml``), graph inputs, not weights. :func:`gfmrag_graph_inputs`
builds that graph for a glmrag index: the flipped edges, and relation features of the texts ``<r>`` and
``inverse_<r>`` (:func:`gfmrag_relation_texts`). (For ``inverse_relation_feat: inverse``, ``rel_attr = [x; -x]``,
swapping the halves negates ``rel_attr``, which a negated ``rel_mlp.weight`` would absorb; the folder reader,
:mod:`glmrag.models.gfmrag_folder`, refuses that setting.)

GFM-RAG's own PyG fallback (``message`` / ``aggregate``, run only when the edge weights need a gradient: its
``visualize`` path explanations) sums the other way, ``edge_index[0] -> edge_index[1]``: it is glmrag's direction
on the unflipped graph, not the model GFM-RAG trains.

Not mapped, so :func:`from_gfmrag_state_dict` raises ``ValueError``: PNA aggregation (13H-wide ``linear``),
per-layer relation embeddings (``project_relations=False``) or query-dependent relations (``relation_linear``),
no ``layer_norm``, ``concat_hidden``, readouts other than 2 layers, unequal hidden sizes, and, named in the
settings, message functions other than DistMult, aggregations other than sum, no ``short_cut``, activations other
than ReLU. GFM-RAG's document ranker (``map_entities_to_docs``) holds no parameters and is not part of this map.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from glmrag.index.kg import INVERSE_PREFIX, KGIndex
from glmrag.nn.gnn import GNNConfig
from glmrag.nn.graph_inputs import GraphInputs, TextEncoder, graph_inputs

ENTITY_MODEL_SETTINGS = {
    "message_func": "distmult",
    "aggregate_func": "sum",
    "short_cut": True,
    "layer_norm": True,
    "concat_hidden": False,
    "activation": "relu",
    "num_mlp_layer": 2,
    "return_hidden": False,
}
"""The ``entity_model`` settings glmrag's layer implements. ``message_func``, ``aggregate_func``, ``short_cut``,
``layer_norm``: GFM-RAG's ``gfmrag/workflow/config/gfm_rag/sft_training.yaml`` and ``kgc_training.yaml``
(``distmult``, ``sum``, ``yes``, ``yes``); ``concat_hidden``, ``activation``, ``num_mlp_layer``: the defaults of
``BaseNBFNet.__init__`` (``gfmrag/models/ultra/base_nbfnet.py``), which those configs keep; ``return_hidden``:
``EntityNBFNet.__init__``'s default (True drops the readout ``mlp``)."""

UPSTREAM_DEFAULTS = {
    "message_func": "distmult",
    "aggregate_func": "sum",
    "short_cut": False,
    "layer_norm": False,
    "concat_hidden": False,
    "activation": "relu",
    "num_mlp_layer": 2,
    "return_hidden": False,
}
"""GFM-RAG's defaults for settings a config leaves out (``BaseNBFNet.__init__`` and ``EntityNBFNet.__init__``,
``gfmrag/models/ultra/``): ``short_cut`` and ``layer_norm`` default to off there, so a config must say yes."""

LAYER_KEYS = {
    "relation_projection.0.weight": "relation_proj.0.weight",
    "relation_projection.0.bias": "relation_proj.0.bias",
    "relation_projection.2.weight": "relation_proj.2.weight",
    "relation_projection.2.bias": "relation_proj.2.bias",
    "linear.weight": "linear.weight",
    "linear.bias": "linear.bias",
    "layer_norm.weight": "norm.weight",
    "layer_norm.bias": "norm.bias",
}
"""``entity_model.layers.{i}.<upstream>`` -> ``convs.{i}.<glmrag>`` (GFM-RAG ``GeneralizedRelationalConv`` with
``project_relations=True``, as ``EntityNBFNet.__init__`` builds it)."""

TOP_KEYS = {
    "question_mlp.weight": "question_proj.weight",
    "question_mlp.bias": "question_proj.bias",
    "rel_mlp.weight": "relation_proj.weight",
    "rel_mlp.bias": "relation_proj.bias",
    "entity_model.mlp.0.weight": "readout.0.weight",
    "entity_model.mlp.0.bias": "readout.0.bias",
    "entity_model.mlp.2.weight": "readout.2.weight",
    "entity_model.mlp.2.bias": "readout.2.bias",
}
"""GFM-RAG ``QueryGNN`` / ``GNNRetriever`` (``gfmrag/models/gfm_rag_v1/model.py``) and ``EntityNBFNet.mlp``."""

_LAYER = re.compile(r"entity_model\.layers\.(\d+)\.(.+)")


def from_gfmrag_state_dict(
    state_dict: Mapping[str, torch.Tensor], entity_model: Mapping[str, object] | None = None
) -> dict[str, torch.Tensor]:
    """A GFM-RAG ``GNNRetriever`` / ``QueryGNN`` state dict as a glmrag :class:`~glmrag.nn.gnn.QueryGNN` state dict.

    Run the model on :func:`gfmrag_graph` of the KG to get GFM-RAG's scores (see the module docstring).

    Args:
        state_dict: the upstream's ``model.state_dict()``, or ``torch.load("model.pth")`` (``{"model": ...}``).
        entity_model: ``config.json["model_config"]["entity_model"]``, checked against
            :data:`ENTITY_MODEL_SETTINGS` (settings absent from it take GFM-RAG's defaults); None skips the check
            of what the tensors cannot show (message and aggregation functions, ``short_cut``, activation).

    Shapes: upstream ``question_mlp.weight`` (H, F_q), ``rel_mlp.weight`` (H, F_r), ``entity_model.layers.{i}.
    linear.weight`` (H, 2H), ``entity_model.mlp.0.weight`` (2H, 2H) -> the same tensors under glmrag's names.

    Raises:
        ValueError: naming the key or setting glmrag's layer does not implement.
    """
    if set(state_dict) == {"model"} and isinstance(state_dict["model"], Mapping):
        state_dict = state_dict["model"]
    if entity_model is not None:
        check_entity_model(entity_model)
    for key in TOP_KEYS:
        if key not in state_dict:
            raise ValueError(
                f"GFM-RAG state dict has no {key!r}: expected a gfmrag.models.gfm_rag_v1 GNNRetriever or QueryGNN "
                "(with question_mlp, rel_mlp and entity_model.mlp of 2 layers)"
            )
    out = {glm: state_dict[up] for up, glm in TOP_KEYS.items()}
    hidden = out["relation_proj.weight"].shape[0]
    layers: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        if key in TOP_KEYS:
            continue
        match = _LAYER.fullmatch(key)
        if match is None:
            raise ValueError(_unmapped(key))
        index, name = int(match.group(1)), match.group(2)
        if name not in LAYER_KEYS:
            raise ValueError(_unmapped(key))
        layers.setdefault(index, {})[LAYER_KEYS[name]] = value
    if sorted(layers) != list(range(len(layers))) or not layers:
        raise ValueError(f"GFM-RAG state dict has entity_model.layers {sorted(layers)}; expected 0..L-1, L >= 1")
    for index, params in sorted(layers.items()):
        for name, glm in LAYER_KEYS.items():
            if glm not in params:
                raise ValueError(
                    f"GFM-RAG state dict has no 'entity_model.layers.{index}.{name}'"
                    + (": glmrag's layer always normalises (layer_norm: yes)" if "layer_norm" in name else "")
                )
        width = params["linear.weight"].shape
        if width != (hidden, 2 * hidden):
            raise ValueError(
                f"'entity_model.layers.{index}.linear.weight' has shape {tuple(width)}, "
                f"expected {(hidden, 2 * hidden)}: glmrag's layer maps [h, a] -> H with every hidden size equal to "
                "input_dim (aggregate_func: pna makes it 13H wide)"
            )
        out.update({f"convs.{index}.{name}": value for name, value in params.items()})
    readout = tuple(out["readout.0.weight"].shape)
    if readout != (2 * hidden, 2 * hidden):
        raise ValueError(
            f"'entity_model.mlp.0.weight' has shape {readout}, expected {(2 * hidden, 2 * hidden)}: glmrag scores "
            "[h_L, q] (concat_hidden: no)"
        )
    return out


def gfmrag_gnn_config(state_dict: Mapping[str, torch.Tensor], **overrides: object) -> GNNConfig:
    """The :class:`~glmrag.nn.gnn.GNNConfig` whose :class:`~glmrag.nn.gnn.QueryGNN` loads the converted state dict.

    Sizes from the tensors: ``hidden_channels`` and ``relation_dim`` from ``rel_mlp.weight`` (H, F_r),
    ``question_dim`` from ``question_mlp.weight`` (H, F_q), ``num_layers`` from ``entity_model.layers``; entity
    features off (GFM-RAG v1: ``use_node_feat: False``, ``sft_training.yaml``). ``overrides`` set the rest
    (``aggregation``, ...).
    """
    converted = from_gfmrag_state_dict(state_dict)
    hidden, relation_dim = converted["relation_proj.weight"].shape
    fields = {
        "hidden_channels": hidden,
        "num_layers": sum(key.endswith(".linear.weight") for key in converted),
        "question_dim": converted["question_proj.weight"].shape[1],
        "relation_dim": relation_dim,
        "use_node_features": False,
    }
    return GNNConfig(**{**fields, **overrides})


def gfmrag_graph(graph: GraphInputs) -> GraphInputs:
    """``graph`` with every edge reversed: glmrag then sums messages as GFM-RAG's ``rspmm`` does.

    GFM-RAG's sum writes ``edge_index[0]`` from ``edge_index[1]`` (module docstring); glmrag's writes
    ``edge_index[1]`` from ``edge_index[0]``. Relation ids and features are unchanged: edge type ``r`` (relation
    feature row ``r``) now carries messages ``t -> h`` for each triple ``(h, r, t)``, as in GFM-RAG. Equivalently,
    the unflipped graph with the two halves of ``relation_features`` swapped.

    Shapes: ``edge_index`` (2, 2T) -> (2, 2T) flipped; every other tensor shared with ``graph``.
    """
    return GraphInputs(
        edge_index=graph.edge_index.flip(0),
        edge_type=graph.edge_type,
        relation_features=graph.relation_features,
        node_features=graph.node_features,
        entity_passage_count=graph.entity_passage_count,
        num_nodes=graph.num_nodes,
    )


def gfmrag_relation_texts(index: KGIndex) -> list[str]:
    """The 2R texts GFM-RAG embeds as relation features, in edge-type order: each relation's name, then
    ``inverse_<name>`` for each (``GraphIndexDatasetV1.process_graph``, ``inverse_relation_feat: text``; glmrag's own
    graph embeds ``inverse <name>``, :func:`glmrag.nn.graph_inputs.relation_texts`)."""
    return list(index.relations) + [INVERSE_PREFIX + r for r in index.relations]


class _Rows:
    """A :class:`~glmrag.nn.graph_inputs.TextEncoder` that hands back rows already embedded, so
    :func:`~glmrag.nn.graph_inputs.graph_inputs` lays out glmrag's edges around GFM-RAG's relation features."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) != len(self.rows):
            raise ValueError(f"{len(self.rows)} relation features for {len(texts)} relation texts")
        return self.rows


def gfmrag_graph_inputs(index: KGIndex, encoder: TextEncoder) -> GraphInputs:
    """The graph a GFM-RAG checkpoint reads for ``index``: glmrag's edge layout reversed (:func:`gfmrag_graph`) and
    relation features embedded from :func:`gfmrag_relation_texts` by ``encoder`` (the checkpoint's sentence
    encoder); no entity features (GFM-RAG v1: ``use_node_feat: False``).

    Shapes: -> ``edge_index`` (2, 2T) flipped, ``relation_features`` (2R, F).
    """
    rows = np.asarray(encoder.encode(gfmrag_relation_texts(index)), dtype=np.float32)  # (2R, F)
    return gfmrag_graph(graph_inputs(index, _Rows(rows), node_features=False))


def check_entity_model(entity_model: Mapping[str, object]) -> None:
    """``ValueError`` naming the first ``entity_model`` setting glmrag's QueryGNN does not implement."""
    for name, wanted in ENTITY_MODEL_SETTINGS.items():
        value = entity_model.get(name, UPSTREAM_DEFAULTS[name])
        if value != wanted:
            raise ValueError(
                f"GFM-RAG entity_model.{name} = {value!r}: glmrag's QueryGNN implements only {name} = {wanted!r}"
            )
    dims = [entity_model.get("input_dim"), *_as_list(entity_model.get("hidden_dims"))]
    if None not in dims and len(set(dims)) != 1:
        raise ValueError(
            f"GFM-RAG entity_model has input_dim {dims[0]} and hidden_dims {dims[1:]}: glmrag's QueryGNN has one "
            "hidden size"
        )


def _as_list(value: object) -> list[object]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _unmapped(key: str) -> str:
    hint = ""
    if key.endswith("relation_linear.weight") or key.endswith("relation_linear.bias"):
        hint = ": query-dependent relations (dependent: yes) are not in glmrag's layer"
    elif re.fullmatch(r"entity_model\.layers\.\d+\.relation\.weight", key):
        hint = ": per-layer relation embeddings (project_relations: no) are not in glmrag's layer"
    elif key.startswith("entity_model.mlp."):
        hint = ": glmrag's readout has 2 layers (num_mlp_layer: 2)"
    return f"GFM-RAG state dict key {key!r} has no counterpart in glmrag's QueryGNN{hint}"
