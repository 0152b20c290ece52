"""A GFM-RAG checkpoint folder (``model.pth`` + ``config.json``, e.g. ``rmanluo/GFM-RAG-8M``) read for glmrag.

GFM-RAG saves its retriever with ``save_model_to_pretrained`` (``gfmrag/utils/util.py``): ``model.pth`` holds
``{"model": state_dict}``, ``config.json`` holds

- ``text_emb_model_config``: the sentence encoder of questions and relations (``BaseTextEmbModel``:
  ``text_emb_model_name``, ``normalize``, ``query_instruct``, ``passage_instruct``, ``model_kwargs``);
- ``model_config``: the ``GNNRetriever`` (``_target_``), its ``entity_model`` (``QueryNBFNet`` settings) and
  ``feat_dim`` (``rel_emb_dim`` in the 2025-02 release); from 2025-08 also ``ranker`` (the document ranker),
  ``init_nodes_weight`` and ``init_nodes_type`` (seeds weighted ``1 / |documents|``);
- from 2025-08, ``dataset_config``: how its graph was built (``GraphIndexDatasetV1``, ``use_node_feat``,
  ``use_relation_feat``, ``use_edge_feat``, ``inverse_relation_feat``, ``target_type``).

:func:`read_gfmrag_folder` honours each of these or refuses the folder with a
:class:`~glmrag.models.checkpointing.CheckpointMismatchError` naming the file, the setting and the fix; the weights
come back under glmrag's names (:func:`glmrag.nn.gfmrag_weights.from_gfmrag_state_dict`). glmrag embeds with
:class:`~glmrag.index.embed.Embedder` (unit rows, no instruction), which is GFM-RAG's ``BaseTextEmbModel`` when
``query_instruct`` and ``passage_instruct`` are null and the encoder normalises (all-mpnet-base-v2 ends in a
``Normalize`` module, so ``normalize: False`` changes nothing there); the retriever checks the latter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from glmrag.index.ranking import DOC_RANKER_ENTITIES
from glmrag.io import CheckpointPathError, load_checkpoint_dict
from glmrag.models.checkpointing import CheckpointMismatchError
from glmrag.nn.gfmrag_weights import check_entity_model, from_gfmrag_state_dict, gfmrag_gnn_config
from glmrag.nn.gnn import GNNConfig

MODEL_FILE = "model.pth"
CONFIG_FILE = "config.json"
DOWNLOAD = "huggingface-cli download rmanluo/GFM-RAG-8M --local-dir <folder>"
"""How GFM-RAG's released checkpoint is fetched (its README names the hub repository ``rmanluo/GFM-RAG-8M``)."""

DATASET_SETTINGS = {
    "class_name": "GraphIndexDatasetV1",
    "use_node_feat": False,
    "use_relation_feat": True,
    "use_edge_feat": False,
    "inverse_relation_feat": "text",
    "target_type": "entity",
}
"""``config.json["dataset_config"]`` as glmrag builds the graph for the checkpoint
(:func:`glmrag.nn.gfmrag_weights.gfmrag_graph_inputs`): entities only, no entity or edge features, relation
features from the relation names and ``inverse_<r>`` texts (GFM-RAG's ``sft_training.yaml``)."""

RANKERS = {"IDFWeightedTopKRanker": "idf_topk", "TopKRanker": "topk", "SimpleRanker": "simple"}
"""GFM-RAG document rankers (``gfmrag/models/gfm_rag_v1/rankers.py``) -> glmrag's (:mod:`glmrag.index.ranking`).
``IDFWeightedRanker`` (IDF-weighted scores of every entity) has no glmrag counterpart."""


@dataclass(frozen=True)
class GFMRAGFolder:
    """What a GFM-RAG checkpoint folder holds, in glmrag's terms."""

    path: Path
    """The folder."""
    gnn: GNNConfig
    """The :class:`~glmrag.nn.gnn.QueryGNN` sizes the weights have (no entity features)."""
    state_dict: dict[str, torch.Tensor]
    """The weights under glmrag's ``QueryGNN`` names."""
    encoder: str
    """``text_emb_model_name``: the sentence encoder of questions and relation names."""
    normalize: bool
    """``text_emb_model_config.normalize``: GFM-RAG L2-normalises the encoder's output."""
    ranker: str | None
    """glmrag's name of ``model_config.ranker`` (``idf_topk``, GFM-RAG's default, when it names none); None for a
    ranker glmrag does not have (:meth:`document_ranker` then needs one chosen)."""
    top_entities: int
    """The ranker's ``top_k`` (20, GFM-RAG's default, when it names none)."""
    ranker_config: Any = None
    """``model_config.ranker`` as ``config.json`` holds it."""

    def document_ranker(self, ranker: str | None = None, key: str = "ranker") -> str:
        """``ranker`` (a choice of the user, the setting ``key``), else the folder's; a
        :class:`~glmrag.models.checkpointing.CheckpointMismatchError` when neither is one glmrag has."""
        if ranker is not None:
            return ranker
        if self.ranker is None:
            raise CheckpointMismatchError(
                f"{self.path / CONFIG_FILE}: model_config.ranker is {self.ranker_config!r}; glmrag has GFM-RAG's "
                f"{', '.join(RANKERS)}: set {key}=idf_topk (or topk, simple) to rank with one of them"
            )
        return self.ranker


def read_gfmrag_folder(path: str | Path, key: str = "folder") -> GFMRAGFolder:
    """The checked contents of the GFM-RAG checkpoint folder ``path`` (the setting ``key`` names it).

    Raises:
        CheckpointPathError: no such folder, or ``config.json`` / ``model.pth`` missing.
        CheckpointMismatchError: a file that is not GFM-RAG's layout, a setting glmrag does not implement, or
            ``config.json`` and ``model.pth`` that disagree on a size; naming the file, the setting and the fix.
    """
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise CheckpointPathError(
            f"{key}={path}: no such folder; give the folder holding {MODEL_FILE} and {CONFIG_FILE}"
        )
    for name in (CONFIG_FILE, MODEL_FILE):
        if not (folder / name).is_file():
            raise CheckpointPathError(
                f"{key}={path}: {folder / name} is missing; a GFM-RAG checkpoint folder holds {MODEL_FILE} and "
                f"{CONFIG_FILE} (GFM-RAG's save_model_to_pretrained; the release: {DOWNLOAD})"
            )
    config_file, model_file = folder / CONFIG_FILE, folder / MODEL_FILE
    config = _read_json(config_file)
    model_config = _node(config, "model_config", config_file)
    _check_target(model_config, "GNNRetriever", "model_config", config_file)
    entity_model = _node(model_config, "entity_model", config_file)
    _check_target(entity_model, "QueryNBFNet", "model_config.entity_model", config_file)
    try:
        check_entity_model(entity_model)
    except ValueError as err:
        raise CheckpointMismatchError(f"{config_file}: {err}") from err
    _check_dataset(config, config_file)
    encoder, normalize = _encoder(config, config_file)
    ranker, top_entities = _ranker(model_config)

    checkpoint = load_checkpoint_dict(model_file, key)
    upstream = checkpoint.get("model")
    if not isinstance(upstream, Mapping):
        raise CheckpointMismatchError(
            f"{model_file} holds the keys {sorted(checkpoint)[:5]}, not GFM-RAG's {{'model': state_dict}}; give the "
            "folder GFM-RAG's save_model_to_pretrained wrote (a .ckpt of train.py goes to ckpt_path / model.init_from)"
        )
    try:
        state_dict = from_gfmrag_state_dict(upstream)
        gnn = gfmrag_gnn_config(upstream)
    except ValueError as err:
        raise CheckpointMismatchError(f"{model_file}: {err}") from err
    _check_sizes(model_config, entity_model, gnn, config_file)
    return GFMRAGFolder(folder, gnn, state_dict, encoder, normalize, ranker, top_entities, model_config.get("ranker"))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointMismatchError(f"{path} is not JSON ({err}); download the folder again ({DOWNLOAD})") from err
    if not isinstance(config, dict):
        raise CheckpointMismatchError(f"{path} holds a {type(config).__name__}, expected GFM-RAG's config object")
    return config


def _node(parent: Mapping[str, Any], name: str, path: Path) -> Mapping[str, Any]:
    node = parent.get(name)
    if not isinstance(node, Mapping):
        raise CheckpointMismatchError(
            f"{path} has no {name!r} object; expected GFM-RAG's config.json (text_emb_model_config, model_config "
            "with entity_model), as its save_model_to_pretrained writes it"
        )
    return node


def _check_target(node: Mapping[str, Any], cls: str, where: str, path: Path) -> None:
    target = str(node.get("_target_", ""))
    if target.rpartition(".")[2] != cls:
        raise CheckpointMismatchError(
            f"{path}: {where}._target_ is {target!r}, expected GFM-RAG's {cls}: glmrag runs GFM-RAG v1's "
            "GNNRetriever with a QueryNBFNet (rmanluo/GFM-RAG-8M), not other models (G-reasoner)"
        )


def _check_dataset(config: Mapping[str, Any], path: Path) -> None:
    dataset = config.get("dataset_config") or {}  # the 2025-02 release has none: its graphs were built so
    for name, wanted in DATASET_SETTINGS.items():
        if name in dataset and dataset[name] != wanted:
            raise CheckpointMismatchError(
                f"{path}: dataset_config.{name} is {dataset[name]!r}; glmrag builds GFM-RAG v1's graph for the "
                f"checkpoint ({name} = {wanted!r}) and cannot give it other inputs"
            )


def _encoder(config: Mapping[str, Any], path: Path) -> tuple[str, bool]:
    node = config.get("text_emb_model_config") or (config.get("dataset_config") or {}).get("text_emb_model_cfgs")
    if not isinstance(node, Mapping) or not isinstance(node.get("text_emb_model_name"), str):
        raise CheckpointMismatchError(
            f"{path} names no sentence encoder (text_emb_model_config.text_emb_model_name); the checkpoint reads "
            "question and relation embeddings of that encoder, so glmrag needs its name"
        )
    target = str(node.get("_target_", "BaseTextEmbModel")).rpartition(".")[2]
    if target != "BaseTextEmbModel":
        raise CheckpointMismatchError(
            f"{path}: text_emb_model_config._target_ is {node['_target_']!r}; glmrag embeds with plain "
            "sentence-transformers, GFM-RAG's BaseTextEmbModel, not its model-specific encoders"
        )
    for name in ("query_instruct", "passage_instruct", "model_kwargs"):
        if node.get(name):
            raise CheckpointMismatchError(
                f"{path}: text_emb_model_config.{name} is {node[name]!r}; glmrag's Embedder adds no instruction and "
                "no model arguments, so its embeddings would not be the ones the checkpoint was trained on"
            )
    return node["text_emb_model_name"], bool(node.get("normalize", False))


def _ranker(model_config: Mapping[str, Any]) -> tuple[str | None, int]:
    node = model_config.get("ranker")
    if node is None:  # the 2025-02 release: the ranker was a separate config, idf_topk_ranker (top_k 20)
        return "idf_topk", DOC_RANKER_ENTITIES
    if not isinstance(node, Mapping):
        return None, DOC_RANKER_ENTITIES
    top_k = node.get("top_k", DOC_RANKER_ENTITIES)
    return RANKERS.get(str(node.get("_target_", "")).rpartition(".")[2]), int(top_k)


def _check_sizes(model_config: Mapping[str, Any], entity_model: Mapping[str, Any], gnn: GNNConfig, path: Path) -> None:
    """``config.json``'s sizes against the tensors' (``gnn``), and the seed weighting."""
    feat_dim = model_config.get("feat_dim", model_config.get("rel_emb_dim"))
    hidden_dims = entity_model.get("hidden_dims")
    said = {
        "model_config.feat_dim": (feat_dim, gnn.relation_dim),
        "model_config.entity_model.input_dim": (entity_model.get("input_dim"), gnn.hidden_channels),
        "len(model_config.entity_model.hidden_dims)": (
            len(hidden_dims) if isinstance(hidden_dims, list) else None,
            gnn.num_layers,
        ),
    }
    for name, (value, held) in said.items():
        if value is not None and value != held:
            raise CheckpointMismatchError(
                f"{path}: {name} is {value} but {MODEL_FILE} holds {held}; the two files come from different "
                "models: download the folder again"
            )
    if model_config.get("init_nodes_weight", True) is not True:
        raise CheckpointMismatchError(
            f"{path}: model_config.init_nodes_weight is {model_config['init_nodes_weight']!r}; glmrag weights each "
            "seed 1 / |passages mentioning it| (GFM-RAG's init_nodes_weight: true) and has no other seeding"
        )
    if model_config.get("init_nodes_type", "document") != "document":
        raise CheckpointMismatchError(
            f"{path}: model_config.init_nodes_type is {model_config['init_nodes_type']!r}; glmrag weights seeds by "
            "the documents (passages) that mention them, GFM-RAG's init_nodes_type: document"
        )
