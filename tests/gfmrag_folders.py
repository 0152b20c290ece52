"""GFM-RAG checkpoint folders for the tests (importable as ``gfmrag_folders``: ``tests/`` is on the path), and
the reference numbers GFM-RAG's own code gave for one of them.

The numbers come from GFM-RAG's ``GNNRetriever`` (github.com/RManLuo/gfm-rag at 57e3e28, its C++ ``rspmm``,
float64), run by::

    PYTHONPATH=$PWD python benchmarks/gfmrag_side_by_side.py --peer <gfm-rag checkout> \\
        --out benchmarks/results/gfmrag_side_by_side.json

(its ``reference`` block): the KG, sizes and seeds below are the script's ``REFERENCE``, its weights
``seeded_weights`` (repeated in :func:`seeded_state_dict`), its features drawn as :func:`seeded_features` draws
them, its ``config.json`` :data:`CONFIG` (written by GFM-RAG's ``save_model_to_pretrained``; encoder renamed).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.kg import EntityLink, KGIndex

RELATIONS = ["born in", "capital of", "member of", "directed"]
TRIPLES = [[0, 0, 1], [1, 1, 2], [2, 2, 3], [3, 0, 4], [0, 1, 3], [4, 2, 2], [1, 0, 4], [5, 3, 0], [2, 3, 5]]
ENTITY_PASSAGES = [[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 1]]
SEEDS = [[0, 3], [2, 5]]
FEAT, HIDDEN, LAYERS = 8, 8, 3
WEIGHT_SEED, FEATURE_SEED, WEIGHT_SCALE = 0, 1, 0.3

GFMRAG_SCORES = [
    [0.6164147667932707, 1.1027543839953315, 1.184483670399807,
     0.8260221862425559, 0.6061509049236404, 1.1751752443709547],
    [1.0871181969649304, 0.7311204800651583, 1.2232053963707525,
     1.4002076785795725, 0.8928006992302799, 1.1541854541641055],
]  # fmt: skip
"""GFM-RAG's entity scores (B=2, N=6) for the two questions, from ``gfmrag_side_by_side.json``'s reference."""

ENCODER = "sentence-transformers/all-mpnet-base-v2"
_TEXT_EMB = {
    "_target_": "gfmrag.text_emb_models.BaseTextEmbModel",
    "text_emb_model_name": ENCODER,
    "normalize": False,
    "batch_size": 32,
    "query_instruct": None,
    "passage_instruct": None,
    "model_kwargs": None,
}
CONFIG = {
    "text_emb_model_config": _TEXT_EMB,
    "dataset_config": {
        "class_name": "GraphIndexDatasetV1",
        "text_emb_model_cfgs": _TEXT_EMB,
        "use_node_feat": False,
        "use_relation_feat": True,
        "use_edge_feat": False,
        "inverse_relation_feat": "text",
        "target_type": "entity",
    },
    "model_config": {
        "_target_": "gfmrag.models.gfm_rag_v1.GNNRetriever",
        "init_nodes_weight": True,
        "init_nodes_type": "document",
        "ranker": {"_target_": "gfmrag.models.gfm_rag_v1.rankers.IDFWeightedTopKRanker", "top_k": 5},
        "entity_model": {
            "_target_": "gfmrag.models.ultra.models.QueryNBFNet",
            "input_dim": HIDDEN,
            "hidden_dims": [HIDDEN] * LAYERS,
            "message_func": "distmult",
            "aggregate_func": "sum",
            "short_cut": True,
            "layer_norm": True,
        },
        "feat_dim": FEAT,
    },
}
"""``config.json`` as GFM-RAG's ``save_model_to_pretrained`` (HEAD) writes it for the reference model."""

RELEASE_2025_02 = {
    "text_emb_model_config": _TEXT_EMB,
    "model_config": {
        "_target_": "gfmrag.models.GNNRetriever",
        "entity_model": {**CONFIG["model_config"]["entity_model"], "_target_": "gfmrag.ultra.models.QueryNBFNet"},
        "rel_emb_dim": FEAT,
    },
}
"""``config.json`` of the 2025-02 layout (``gfmrag/utils/util.py`` at b4f81ab): no ``dataset_config``, no ranker,
``rel_emb_dim`` for ``feat_dim``."""


def upstream_shapes(feat: int = FEAT, hidden: int = HIDDEN, layers: int = LAYERS) -> dict[str, tuple[int, ...]]:
    """GFM-RAG ``GNNRetriever.state_dict()``'s names and shapes (its ``QueryNBFNet`` with ``layer_norm``)."""
    shapes = {
        "question_mlp.weight": (hidden, feat),
        "question_mlp.bias": (hidden,),
        "rel_mlp.weight": (hidden, feat),
        "rel_mlp.bias": (hidden,),
        "entity_model.mlp.0.weight": (2 * hidden, 2 * hidden),
        "entity_model.mlp.0.bias": (2 * hidden,),
        "entity_model.mlp.2.weight": (1, 2 * hidden),
        "entity_model.mlp.2.bias": (1,),
    }
    for i in range(layers):
        layer = f"entity_model.layers.{i}."
        shapes |= {
            layer + "layer_norm.weight": (hidden,),
            layer + "layer_norm.bias": (hidden,),
            layer + "linear.weight": (hidden, 2 * hidden),
            layer + "linear.bias": (hidden,),
            layer + "relation_projection.0.weight": (hidden, hidden),
            layer + "relation_projection.0.bias": (hidden,),
            layer + "relation_projection.2.weight": (hidden, hidden),
            layer + "relation_projection.2.bias": (hidden,),
        }
    return shapes


def seeded_state_dict(shapes: dict[str, tuple[int, ...]] | None = None, seed: int = WEIGHT_SEED) -> dict:
    """The side-by-side's ``seeded_weights``: per name in sorted order one ``randn`` (float64, one generator),
    times ``1 / sqrt(fan_in)`` for a matrix and ``WEIGHT_SCALE`` for a vector, plus 1 for a ``layer_norm.weight``,
    rounded to float32."""
    shapes = upstream_shapes() if shapes is None else shapes
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name in sorted(shapes):
        scale = shapes[name][-1] ** -0.5 if len(shapes[name]) == 2 else WEIGHT_SCALE
        noise = scale * torch.randn(shapes[name], generator=generator, dtype=torch.float64)
        out[name] = (noise + (1.0 if name.endswith("layer_norm.weight") else 0.0)).float()
    return out


def seeded_features() -> tuple[torch.Tensor, torch.Tensor]:
    """The reference's relation features (2R, F) and question embeddings (B, F): drawn in float64, rounded to
    float32 (as an encoder gives them), returned in float64."""
    generator = torch.Generator().manual_seed(FEATURE_SEED)
    rel_attr = torch.randn(2 * len(RELATIONS), FEAT, generator=generator, dtype=torch.float64)
    question = torch.randn(len(SEEDS), FEAT, generator=generator, dtype=torch.float64)
    return rel_attr.float().double(), question.float().double()


def write_folder(folder: Path, config: dict | None = None, state: dict | None = None) -> Path:
    """A GFM-RAG checkpoint folder: ``model.pth`` = ``{"model": state}`` (default :func:`seeded_state_dict`),
    ``config.json`` = ``config`` (default :data:`CONFIG`)."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"model": seeded_state_dict() if state is None else state}, folder / "model.pth")
    (folder / "config.json").write_text(json.dumps(CONFIG if config is None else config, indent=4))
    return folder


def edited_config(**paths: object) -> dict:
    """:data:`CONFIG` with ``a.b.c=value`` edits (``"model_config.entity_model.aggregate_func": "pna"``)."""
    config = copy.deepcopy(CONFIG)
    for path, value in paths.items():
        *parents, leaf = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[leaf] = value
    return config


class ReferenceEncoder:
    """The reference's features as a sentence encoder: a relation name, ``inverse_<name>`` and each question text
    map to their seeded rows; any other text is a KeyError (the texts are part of what is checked)."""

    def __init__(self, model_name: str = ENCODER, modules: list | None = None) -> None:
        rel_attr, question = seeded_features()
        names = RELATIONS + ["inverse_" + r for r in RELATIONS]
        self.rows = dict(zip(names, rel_attr.float().numpy(), strict=True))
        self.rows |= {q.question: row for q, row in zip(questions(), question.float().numpy(), strict=True)}
        self.model_name, self.dim = model_name, FEAT
        self.model = [] if modules is None else modules

    def encode(self, texts, stage: str = "embedding", unit: str = "phrase") -> np.ndarray:
        return np.stack([self.rows[t] for t in texts]).astype(np.float32)


def reference_index() -> KGIndex:
    """The reference KG as a glmrag index, each question linked to its seeds."""
    links = {q.id: [EntityLink(f"entity {e}", e, 1.0) for e in s] for q, s in zip(questions(), SEEDS, strict=True)}
    return KGIndex(
        entities=[f"entity {e}" for e in range(len(ENTITY_PASSAGES))],
        relations=list(RELATIONS),
        triples=np.array(TRIPLES),
        passage_ids=[p.id for p in corpus()],
        entity_passages=sp.csr_matrix(np.array(ENTITY_PASSAGES, dtype=np.float32)),
        question_links=links,
        manifest={"kind": "gfmrag reference"},
    )


def corpus() -> Corpus:
    return Corpus([Passage(f"p{i}", f"title {i}", f"text {i}") for i in range(len(ENTITY_PASSAGES[0]))])


def questions() -> list[Question]:
    return [Question(f"q{i}", f"reference question {i}", ("x",), ()) for i in range(len(SEEDS))]
