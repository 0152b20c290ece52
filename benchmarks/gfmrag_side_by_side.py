"""A GFM-RAG checkpoint folder scored by glmrag and by GFM-RAG's own code, side by side, on one small KG.

GFM-RAG's side is its code, imported from a checkout of https://github.com/RManLuo/gfm-rag given with ``--peer``
(nothing of it is copied here). Its package ``__init__`` imports its whole pipeline (LLMs, indexers, trainers), so
the packages ``gfmrag`` and ``gfmrag.text_emb_models`` are registered by path and their modules imported one by
one: ``gfmrag.models.gfm_rag_v1`` (``GNNRetriever``, ``ultra.QueryNBFNet``, whose C++ ``rspmm`` sums the messages;
it compiles on first use, a C++ compiler and ninja are needed), ``gfmrag.utils.util`` (``save_model_to_pretrained``,
``load_model_from_pretrained``) and ``gfmrag.text_emb_models.base_model`` (``BaseTextEmbModel``).

1. GFM-RAG builds its retriever from the ``model`` node of its ``gfm_rag/sft_training.yaml`` (GNNRetriever,
   QueryNBFNet with DistMult, sum, short_cut, layer_norm; ranker ``idf_topk_ranker``), ``--hidden`` wide and
   ``--layers`` deep (GFM-RAG-8M: 512 x 6), its weights drawn by :func:`seeded_weights` (``--seed``), so layer
   norms and biases are not at their trivial values.
2. GFM-RAG writes the folder (``model.pth``, ``config.json``) with ``save_model_to_pretrained`` from a config with
   its ``GraphIndexDatasetV1`` settings and its ``mpnet`` encoder config pointing at ``--encoder`` (default: the
   offline all-MiniLM-L6-v2 glmrag ships; GFM-RAG-8M's all-mpnet-base-v2 is glmrag's ``[mpnet]`` extra,
   ``--encoder $GLMRAG_CACHE_DIR/models/all-mpnet-base-v2`` once assembled), and reads it back with
   ``load_model_from_pretrained``.
3. One KG: a seeded random glmrag :class:`~glmrag.index.kg.KGIndex` (entities, named relations, triples, passages,
   questions linked to seed entities). GFM-RAG's graph is laid out as its ``GraphIndexDatasetV1.process_graph``
   lays it out (edges, then the flipped edges typed ``r + R``; relation features of the names and of
   ``"inverse_" + name``, embedded with ``is_query=False``), its questions embedded with ``is_query=True``, its seed
   weights from ``get_entities_weight`` of the entity-to-passage matrix.
4. glmrag reads the folder (:func:`~glmrag.models.gfmrag_folder.read_gfmrag_folder`) and builds its own inputs:
   :func:`~glmrag.nn.gfmrag_weights.gfmrag_graph_inputs`, :class:`~glmrag.index.embed.Embedder`,
   :func:`~glmrag.nn.graph_inputs.seed_weights`.

Reported (max abs differences): the inputs (relation features, question embeddings: float32 encoders; seed
weights); the entity scores in float64 on GFM-RAG's inputs (the model alone) and on each side's own inputs (end to
end); and the :class:`~glmrag.retrievers.gfmrag_checkpoint.GFMRAGCheckpointRetriever` of the folder (float32, as
eval.py runs it): its top entities and their scores, and its passage scores against GFM-RAG's
``IDFWeightedTopKRanker`` on GFM-RAG's scores.

Also reported: controls (the scores without either half of the remap: edges not reversed, glmrag's
``inverse <r>`` texts), and ``reference``, GFM-RAG's scores on a fixed 6-entity KG with seeded weights and features
(:data:`REFERENCE`, :func:`reference_run`), the numbers ``tests/gfmrag_folders.py`` holds glmrag to.

Run: ``PYTHONPATH=$PWD python benchmarks/gfmrag_side_by_side.py --peer /path/to/gfm-rag --out
benchmarks/results/gfmrag_side_by_side.json`` (under a minute; the first run compiles the peer's rspmm, ~30 s).
The JSON records the command; ``gfmrag_side_by_side_mpnet_512x6.json`` is the run at GFM-RAG-8M's sizes.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.embed import DEFAULT_MODEL, Embedder, resolve_model_path
from glmrag.index.kg import EntityLink, KGIndex
from glmrag.models.gfmrag_folder import read_gfmrag_folder
from glmrag.nn.gfmrag_weights import gfmrag_graph, gfmrag_graph_inputs
from glmrag.nn.gnn import QueryGNN
from glmrag.nn.graph_inputs import graph_inputs, seed_weights
from glmrag.retrievers.gfmrag_checkpoint import GFMRAGCheckpointRetriever

RELATIONS = ["born in", "capital of", "member of", "directed", "located in", "spouse of"]
ENTITIES, TRIPLES, PASSAGES, QUESTIONS, TOP_ENTITIES = 40, 120, 12, 5, 5
STUB_PACKAGES = ("gfmrag", "gfmrag.text_emb_models")
WEIGHT_SCALE = 0.3
REFERENCE = {
    "relations": ["born in", "capital of", "member of", "directed"],
    "triples": [[0, 0, 1], [1, 1, 2], [2, 2, 3], [3, 0, 4], [0, 1, 3], [4, 2, 2], [1, 0, 4], [5, 3, 0], [2, 3, 5]],
    "entity_passages": [[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 1]],
    "seeds": [[0, 3], [2, 5]],
    "feat_dim": 8,
    "hidden": 8,
    "layers": 3,
}
"""The KG of the test's reference numbers: 6 entities, 4 relations, 9 triples (head, relation, tail), 3 passages,
2 questions with their seed entities; the sizes of the model."""


def import_peer(checkout: Path) -> types.SimpleNamespace:
    """GFM-RAG's modules from ``checkout``, its package ``__init__`` files skipped (see the module docstring)."""
    root = checkout / "gfmrag"
    if not (root / "models" / "gfm_rag_v1" / "model.py").is_file():
        raise SystemExit(f"--peer {checkout}: no gfmrag/models/gfm_rag_v1/model.py; pass a checkout of RManLuo/gfm-rag")
    for name in STUB_PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        sys.modules[name] = package
    text_emb = importlib.import_module("gfmrag.text_emb_models.base_model")
    sys.modules["gfmrag.text_emb_models"].BaseTextEmbModel = text_emb.BaseTextEmbModel  # what its __init__ exports
    return types.SimpleNamespace(
        model=importlib.import_module("gfmrag.models.gfm_rag_v1.model"),
        rankers=importlib.import_module("gfmrag.models.gfm_rag_v1.rankers"),
        util=importlib.import_module("gfmrag.utils.util"),
        text_emb=text_emb,
        config=root / "workflow" / "config",
    )


def peer_config(peer: types.SimpleNamespace, encoder: str, hidden: int, layers: int):
    """GFM-RAG's ``sft_training.yaml`` ``model`` and ``datasets`` nodes at ``hidden`` x ``layers``, ranker
    ``idf_topk_ranker`` (``top_k`` :data:`TOP_ENTITIES`), encoder ``mpnet.yaml`` with ``encoder`` as its name."""
    from omegaconf import OmegaConf

    sft = OmegaConf.load(peer.config / "gfm_rag" / "sft_training.yaml")
    model = OmegaConf.to_container(sft.model, resolve=False)
    model["entity_model"].update(input_dim=hidden, hidden_dims=[hidden] * layers)
    model["ranker"] = {**OmegaConf.to_container(OmegaConf.load(peer.config / "doc_ranker" / "idf_topk_ranker.yaml"))}
    model["ranker"]["top_k"] = TOP_ENTITIES
    text_emb = OmegaConf.to_container(OmegaConf.load(peer.config / "text_emb_model" / "mpnet.yaml"))
    text_emb["text_emb_model_name"] = encoder
    datasets = OmegaConf.to_container(sft.datasets, resolve=False)
    datasets["cfgs"]["text_emb_model_cfgs"] = text_emb
    return OmegaConf.create({"model": model, "datasets": datasets}), text_emb


def peer_model(peer, cfg, feat_dim: int, seed: int) -> torch.nn.Module:
    """GFM-RAG's GNNRetriever of ``cfg.model`` with :func:`seeded_weights`, in float32 (as GFM-RAG saves them;
    compared in float64, to which float32 weights convert exactly)."""
    from hydra.utils import instantiate

    model = instantiate(cfg.model, feat_dim=feat_dim)
    model.load_state_dict(seeded_weights(model.state_dict(), seed))
    return model.eval()


def seeded_weights(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """The weight rule ``tests/gfmrag_folders.py`` repeats: for each name of ``state`` in sorted order, one draw of
    ``randn(shape)`` (float64, one generator seeded ``seed``), scaled by ``1 / sqrt(fan_in)`` for a matrix and by
    :data:`WEIGHT_SCALE` for a vector (plus 1 for a ``layer_norm.weight``), rounded to float32."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name in sorted(state):
        shape = state[name].shape
        scale = shape[-1] ** -0.5 if len(shape) == 2 else WEIGHT_SCALE
        noise = scale * torch.randn(shape, generator=generator, dtype=torch.float64)
        out[name] = (noise + (1.0 if name.endswith("layer_norm.weight") else 0.0)).float()
    return out


def reference_run(peer, cfg, seed: int) -> dict:
    """GFM-RAG's entity scores on :data:`REFERENCE` with seeded inputs, the numbers the test holds glmrag to.

    ``cfg.model`` at ``REFERENCE["hidden"]`` x ``REFERENCE["layers"]``, :func:`seeded_weights` (``seed``); one
    float64 generator seeded ``seed + 1`` draws ``rel_attr`` (2R, F) then the questions (B, F), each rounded to
    float32; seeds weighted by
    ``get_entities_weight`` of ``entity_passages``.
    """
    from omegaconf import OmegaConf
    from torch_geometric.data import Data

    small = OmegaConf.create(OmegaConf.to_container(cfg))
    small.model.entity_model.input_dim = REFERENCE["hidden"]
    small.model.entity_model.hidden_dims = [REFERENCE["hidden"]] * REFERENCE["layers"]
    model = peer_model(peer, small, REFERENCE["feat_dim"], seed)
    folder = Path(tempfile.mkdtemp(prefix="gfmrag-reference-"))
    peer.util.save_model_to_pretrained(model, small, str(folder))
    model = model.double()
    generator = torch.Generator().manual_seed(seed + 1)
    num_rel, feat = len(REFERENCE["relations"]), REFERENCE["feat_dim"]
    # rounded to float32, as a sentence encoder gives them and glmrag's graph inputs hold them
    rel_attr = torch.randn(2 * num_rel, feat, generator=generator, dtype=torch.float64).float().double()
    question = torch.randn(len(REFERENCE["seeds"]), feat, generator=generator, dtype=torch.float64).float().double()
    triples = torch.tensor(REFERENCE["triples"])
    target = triples[:, [0, 2]].t()  # (2, T)
    num_nodes = len(REFERENCE["entity_passages"])
    graph = Data(
        edge_index=torch.cat([target, target.flip(0)], dim=1),
        edge_type=torch.cat([triples[:, 1], triples[:, 1] + num_rel]),
        num_nodes=num_nodes,
        num_relations=2 * num_rel,
        rel_attr=rel_attr,
        target_to_other_types={},
    )
    mask = torch.zeros(len(REFERENCE["seeds"]), num_nodes, dtype=torch.float64)
    for row, seeds in enumerate(REFERENCE["seeds"]):
        mask[row, seeds] = 1
    ent2doc = torch.tensor(REFERENCE["entity_passages"], dtype=torch.float64).to_sparse()
    with torch.no_grad():
        scores = model(
            graph, {"question_embeddings": question, "start_nodes_mask": mask}, model.get_entities_weight(ent2doc)
        )
    return {
        **REFERENCE,
        "weight_seed": seed,
        "feature_seed": seed + 1,
        "config_json": json.loads((folder / "config.json").read_text()),
        "entity_scores": scores.tolist(),
    }


def small_kg(seed: int) -> tuple[KGIndex, Corpus, list[Question]]:
    """A seeded random KG: every entity in 1-3 passages, each question linked to 1-3 seed entities."""
    rng = np.random.default_rng(seed)
    triples = np.stack(
        [
            rng.integers(0, ENTITIES, TRIPLES),
            rng.integers(0, len(RELATIONS), TRIPLES),
            rng.integers(0, ENTITIES, TRIPLES),
        ],
        axis=1,
    )
    mentions = np.zeros((ENTITIES, PASSAGES))
    for e in range(ENTITIES):
        mentions[e, rng.choice(PASSAGES, rng.integers(1, 4), replace=False)] = 1
    passages = [Passage(f"p{i}", f"title {i}", f"passage {i}") for i in range(PASSAGES)]
    questions = [
        Question(f"q{i}", f"Which entity does question {i} ask about, through its seeds?", ("x",), ())
        for i in range(QUESTIONS)
    ]
    links = {
        q.id: [EntityLink(f"entity {e}", int(e), 1.0) for e in rng.choice(ENTITIES, rng.integers(1, 4), replace=False)]
        for q in questions
    }
    index = KGIndex(
        entities=[f"entity {e}" for e in range(ENTITIES)],
        relations=list(RELATIONS),
        triples=triples,
        passage_ids=[p.id for p in passages],
        entity_passages=sp.csr_matrix(mentions),
        question_links=links,
        manifest={"kind": "gfmrag_side_by_side", "seed": seed},
    )
    return index, Corpus(passages), questions


def peer_inputs(peer, index: KGIndex, questions: list[Question], text_emb: dict):
    """GFM-RAG's graph, question embeddings, seed mask and seed weights for ``index`` (module docstring, step 3)."""
    from torch_geometric.data import Data

    encoder = peer.text_emb.BaseTextEmbModel(**{k: v for k, v in text_emb.items() if k != "_target_"})
    triples = torch.as_tensor(index.triples)
    target = triples[:, [0, 2]].t()  # (2, T) head, tail
    names = list(index.relations)
    rel_attr = torch.cat(
        [encoder.encode(names, is_query=False), encoder.encode(["inverse_" + r for r in names], is_query=False)]
    )  # (2R, F)
    graph = Data(
        edge_index=torch.cat([target, target.flip(0)], dim=1),
        edge_type=torch.cat([triples[:, 1], triples[:, 1] + len(names)]),
        num_nodes=index.num_entities,
        num_relations=2 * len(names),
        rel_attr=rel_attr.double(),
        target_to_other_types={},  # entity scores only: map_entities_to_docs maps nothing
    )
    question_emb = encoder.encode([q.question for q in questions], is_query=True, show_progress_bar=False).double()
    mask = torch.zeros(len(questions), index.num_entities, dtype=torch.float64)
    for row, q in enumerate(questions):
        mask[row, index.seeds(q.id)] = 1
    coo = index.entity_passages.tocoo()
    ent2doc = torch.sparse_coo_tensor(np.stack([coo.row, coo.col]), coo.data, coo.shape, dtype=torch.float64)
    return graph, question_emb, mask, ent2doc


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", type=Path, required=True, help="a checkout of github.com/RManLuo/gfm-rag")
    parser.add_argument("--peer-commit", help="the peer's commit, when --peer is an export without .git")
    parser.add_argument("--encoder", default=resolve_model_path(DEFAULT_MODEL), help="sentence-transformers folder")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the JSON here too")
    args = parser.parse_args()
    torch.set_num_threads(1)

    peer = import_peer(args.peer)
    cfg, text_emb = peer_config(peer, args.encoder, args.hidden, args.layers)
    index, corpus, questions = small_kg(args.seed)
    graph, question_emb, mask, ent2doc = peer_inputs(peer, index, questions, text_emb)
    model = peer_model(peer, cfg, graph.rel_attr.shape[1], args.seed)
    folder = Path(tempfile.mkdtemp(prefix="gfmrag-folder-"))
    peer.util.save_model_to_pretrained(model, cfg, str(folder))
    reloaded, _ = peer.util.load_model_from_pretrained(str(folder))
    model, reloaded = model.double(), reloaded.double().eval()
    with torch.no_grad():  # edge weights without grad: GFM-RAG's layers sum with its C++ rspmm
        weight = model.get_entities_weight(ent2doc)  # (N,)
        want = model(graph, {"question_embeddings": question_emb, "start_nodes_mask": mask}, weight)  # (B, N)
        again = reloaded(graph, {"question_embeddings": question_emb, "start_nodes_mask": mask}, weight)
        want_docs = peer.rankers.IDFWeightedTopKRanker(TOP_ENTITIES)(want, ent2doc)  # (B, P)

    checkpoint = read_gfmrag_folder(folder)
    ours = QueryGNN(checkpoint.gnn).double().eval()
    ours.load_state_dict(checkpoint.state_dict)
    embedder = Embedder(args.encoder)
    own_graph = gfmrag_graph_inputs(index, embedder)
    own_question = torch.from_numpy(embedder.encode([q.question for q in questions]))  # (B, F)
    own_seed = seed_weights(index, [q.id for q in questions])  # (B, N)
    peer_graph = own_graph.to("cpu")
    peer_graph.relation_features = graph.rel_attr  # GFM-RAG's float64 inputs, the model alone compared
    glmrag_texts = gfmrag_graph(graph_inputs(index, embedder, node_features=False))  # "inverse <r>", flipped
    glmrag_texts.relation_features = glmrag_texts.relation_features.double()
    with torch.no_grad():
        model_only = ours(peer_graph, question_emb, mask * weight)
        controls = {  # what each half of the remap buys: without it, glmrag's scores are not GFM-RAG's
            "edges_not_flipped": max_diff(ours(gfmrag_graph(peer_graph), question_emb, mask * weight), want),
            "inverse_texts_of_glmrag": max_diff(ours(glmrag_texts, question_emb, mask * weight), want),
        }
        own_graph.relation_features = own_graph.relation_features.double()
        end_to_end = ours(own_graph, own_question.double(), own_seed.double())

    retriever = GFMRAGCheckpointRetriever(str(folder), top_entities=TOP_ENTITIES, cache_dir=None)
    rankings = retriever.retrieve(questions, index, corpus, top_k=PASSAGES)
    top_match, entity_gap, passage_gap = True, 0.0, 0.0
    for row, ranking in enumerate(rankings):
        top_match &= ranking.entity_ids == want[row].topk(TOP_ENTITIES).indices.tolist()
        entity_gap = max(entity_gap, max_diff(torch.tensor(ranking.entity_scores), want[row, ranking.entity_ids]))
        positions = [index.passage_position[p] for p in ranking.passage_ids]
        passage_gap = max(passage_gap, max_diff(torch.tensor(ranking.passage_scores), want_docs[row, positions]))

    commit = (
        args.peer_commit
        or subprocess.run(
            ["git", "-C", str(args.peer), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    report = {
        "command": "PYTHONPATH=$PWD python benchmarks/gfmrag_side_by_side.py " + " ".join(sys.argv[1:]),
        "torch": torch.__version__,
        "device": "cpu, 1 thread",
        "peer": str(args.peer),
        "peer_commit": commit or "unknown (not a git work tree; pass --peer-commit)",
        "encoder": args.encoder,
        "sizes": {
            "hidden": args.hidden,
            "layers": args.layers,
            "feat_dim": int(graph.rel_attr.shape[1]),
            "parameters": sum(p.numel() for p in model.parameters()),
            "entities": ENTITIES,
            "relations": len(RELATIONS),
            "triples": TRIPLES,
            "passages": PASSAGES,
            "questions": QUESTIONS,
            "seed": args.seed,
        },
        "config_json": json.loads((folder / "config.json").read_text()),
        "max_abs_diff": {
            "peer_reload_scores": max_diff(again, want),
            "relation_features_float32": max_diff(own_graph.relation_features, graph.rel_attr),
            "question_embeddings_float32": max_diff(own_question, question_emb),
            "seed_weights": max_diff(own_seed, mask * weight),
            "entity_scores_float64_peer_inputs": max_diff(model_only, want),
            "entity_scores_float64_own_inputs": max_diff(end_to_end, want),
            "retriever_top_entity_scores_float32": entity_gap,
            "retriever_passage_scores_float32": passage_gap,
        },
        "retriever_top_entities_equal": bool(top_match),
        "controls_max_abs_diff": controls,
        "score_range": [float(want.min()), float(want.max())],
        "reference": reference_run(peer, cfg, args.seed),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
