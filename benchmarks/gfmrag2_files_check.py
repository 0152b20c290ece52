"""glmrag's export in GFM-RAG 2.0's stage-1 files, read by gfmrag 2.0's own loader (issue 51).

Builds (or takes from the cache) the index of the embedded MuSiQue set, writes it with
:func:`~glmrag.index.gfmrag2_io.export_gfmrag2` into GFM-RAG's dataset layout
(``<work>/musique100/processed/stage1/{nodes,relations,edges}.csv`` beside ``raw/documents.json``, the
``{title: text}`` corpus its loader opens), and loads that folder with ``GraphIndexDataset``
(``gfmrag/graph_index_datasets/graph_index_dataset.py`` of ``--peer``, a checkout of RManLuo/gfm-rag at
version 2.0.0 or the unpacked ``gfmrag-2.0.0`` wheel). Its ``process_graph`` reads the CSV files with pandas
and builds its PyG graph; node, relation and edge features are off, so no text encoder is loaded.

Nothing of gfmrag is copied here, and its code runs unchanged, except that two package ``__init__`` files are
not run: ``gfmrag/__init__.py`` and ``gfmrag/text_emb_models/__init__.py`` import its trainers, retriever and
vLLM / NV-Embed encoders (vllm, langchain, pylate, einops: GPU-sized packages its loader does not use). The
two packages are registered empty, pointing at their real folders, so every module the loader imports is
gfmrag's own. gfmrag 2.0.0 declares Python 3.12; its loader runs as is on glmrag's 3.11.

Checked: the peer's counts of nodes (by type), relations (before its inverse copies) and edges equal
glmrag's; it skips no edge; every triple and every passage link it reads, by name (a node's name from
``nodes.csv``, as its retriever reads it), equals glmrag's; a seeded sample of triples is printed from
both; and ``import_gfmrag2`` of the files gives the index back.

    python benchmarks/gfmrag2_files_check.py --peer /path/to/gfm-rag \\
        [--out benchmarks/results/gfmrag2_files_check.json]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import logging
import random
import re
import sys
import tempfile
import time
import types
from pathlib import Path

import pandas as pd

import glmrag
from glmrag.index.gfmrag2_io import MENTION_RELATION, export_gfmrag2, import_gfmrag2
from glmrag.index.gfmrag_io import documents_of

LOADER = Path("gfmrag/graph_index_datasets/graph_index_dataset.py")
SAMPLE = 8


def load_peer(checkout: Path) -> types.ModuleType:
    """gfmrag's ``graph_index_dataset`` module from ``checkout``, without its two heavy package ``__init__`` files."""
    if not (checkout / LOADER).is_file():
        raise SystemExit(f"--peer {checkout}: no {LOADER} there; pass a checkout of RManLuo/gfm-rag 2.0")
    for name in ("gfmrag", "gfmrag.text_emb_models"):
        package = types.ModuleType(name)
        package.__path__ = [str(checkout / name.replace(".", "/"))]
        sys.modules[name] = package
    from gfmrag.text_emb_models.base_model import BaseTextEmbModel  # its own module, for the loader's import

    sys.modules["gfmrag.text_emb_models"].BaseTextEmbModel = BaseTextEmbModel
    # gfmrag.utils first, as gfmrag/__init__.py's imports reach it: it and graph_index_datasets import each other
    import gfmrag.utils  # noqa: F401
    from gfmrag.graph_index_datasets import graph_index_dataset

    return graph_index_dataset


def peer_version(checkout: Path) -> str:
    """The version that the checkout's pyproject.toml or the unpacked wheel's METADATA declares."""
    pyproject = checkout / "pyproject.toml"
    texts = [pyproject.read_text()] if pyproject.is_file() else []
    texts += [meta.read_text() for meta in checkout.glob("gfmrag-*.dist-info/METADATA")]
    for text in texts:
        found = re.search(r'^(?:version = "|Version: )([^"\n]+)', text, re.M)
        if found:
            return found.group(1)
    return "unknown"


class SkippedEdges(logging.Handler):
    """Counts the peer's "Skipping edge" warnings (an edge naming a node or relation it does not know)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith("Skipping edge")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", type=Path, required=True, help="checkout (or unpacked wheel) of gfmrag 2.0")
    parser.add_argument("--out", type=Path, default=None, help="write the result here as JSON")
    parser.add_argument("--work", type=Path, default=None, help="folder for the dataset layout (default: a temp dir)")
    args = parser.parse_args()
    peer = load_peer(args.peer)
    from omegaconf import OmegaConf

    data = glmrag.load_data("musique100")
    index = glmrag.build_index(data)
    documents = documents_of(index, data.corpus, "gfmrag2_files_check")

    work = args.work or Path(tempfile.mkdtemp(prefix="gfmrag2_check_"))
    stage1 = work / "musique100" / "processed" / "stage1"
    start = time.perf_counter()
    export_gfmrag2(index, data.corpus, stage1)
    export_s = time.perf_counter() - start
    raw = work / "musique100" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    corpus_json = {title: "\n\n".join(p.text for p in passages) for title, (passages, _) in documents.items()}
    (raw / "documents.json").write_text(json.dumps(corpus_json, ensure_ascii=False))

    skipped = SkippedEdges()
    logging.getLogger(peer.__name__).addHandler(skipped)
    start = time.perf_counter()
    dataset = peer.GraphIndexDataset(
        root=str(work),
        data_name="musique100",
        text_emb_model_cfgs=OmegaConf.create({"_target_": "never.instantiated"}),
        use_node_feat=False,
        use_relation_feat=False,
        use_edge_feat=False,
        force_reload=True,  # parse the CSV files even where an earlier run left processed/stage2
    )
    load_s = time.perf_counter() - start
    graph = dataset.graph

    # The peer's ids -> names, as its retriever reads nodes.csv (GFMRetriever.from_config: uid, else name, is the key).
    nodes = pd.read_csv(stage1 / "nodes.csv", keep_default_na=False, dtype=str)
    name_of_key = dict(zip(nodes["uid" if "uid" in nodes else "name"], nodes["name"], strict=True))
    node_name = {i: name_of_key[key] for key, i in dataset.node2id.items()}
    rel_name = {i: rel for rel, i in dataset.rel2id.items()}
    heads, tails = graph.target_edge_index.tolist()
    peer_edges = [
        (node_name[h], rel_name[r], node_name[t])
        for h, t, r in zip(heads, tails, graph.target_edge_type.tolist(), strict=True)
    ]
    peer_triples = [e for e in peer_edges if e[1] != MENTION_RELATION]
    peer_mentions = {(h, t) for h, r, t in peer_edges if r == MENTION_RELATION}

    ents, rels = index.entities, index.relations
    ours = [(ents[h], rels[r], ents[t]) for h, r, t in index.triples.tolist()]
    our_mentions = {(ents[e], title) for title, (_, ids) in documents.items() for e in ids}
    type_counts = {str(t): len(ids) for t, ids in graph.nodes_by_type.items()}
    back = import_gfmrag2(stage1, data.corpus)
    # GFM-RAG names a document by its title: each passage comes back with the entities of all passages of its title
    title_entities = {title: ids for title, (_, ids) in documents.items()}
    title_links = {(e, col) for col, p in enumerate(data.corpus) for e in title_entities[p.title]}
    back_links = set(zip(*back.entity_passages.nonzero(), strict=True))
    rng = random.Random(0)
    sample = sorted(rng.sample(range(len(ours)), SAMPLE))
    num_relations = graph.num_relations // 2  # the peer adds an inverse of each

    result = {
        "peer": {
            "version": peer_version(args.peer),
            "loader": f"{LOADER} GraphIndexDataset (process_graph), features off",
            "loader_sha256": hashlib.sha256((args.peer / LOADER).read_bytes()).hexdigest()[:16],
            "not_run": ["gfmrag/__init__.py", "gfmrag/text_emb_models/__init__.py"],
            "python": sys.version.split()[0],
            "pandas": pd.__version__,
        },
        "dataset": "musique100",
        "files": {
            "nodes_rows": len(nodes),
            "uid_column": "uid" in nodes,
            "entities_keyed_by_uid": int((nodes["uid"] != nodes["name"]).sum()) if "uid" in nodes else 0,
            "relations_rows": len(pd.read_csv(stage1 / "relations.csv", keep_default_na=False)),
            "edges_rows": len(pd.read_csv(stage1 / "edges.csv", keep_default_na=False)),
            "export_s": round(export_s, 2),
        },
        "glmrag": {
            "passages": len(index.passage_ids),
            "titles": len(documents),
            "entities": len(ents),
            "relations": len(rels),
            "triples": len(ours),
            "passage_links": int(index.entity_passages.nnz),
            "title_links": len(our_mentions),
            "passage_links_title_merged": len(title_links),
        },
        "gfmrag": {
            "nodes": int(graph.num_nodes),
            "nodes_by_type": type_counts,
            "relations": num_relations,
            "edges": len(peer_edges),
            "edges_with_inverses": int(graph.edge_index.shape[1]),
            "skipped_edges": skipped.count,
            "load_s": round(load_s, 2),
        },
        "equal": {
            "nodes": graph.num_nodes == len(ents) + len(documents),
            "entity_nodes": type_counts.get("entity") == len(ents),
            "document_nodes": type_counts.get("document") == len(documents),
            "relations": num_relations == len(rels) + (MENTION_RELATION not in rels),
            "edges": len(peer_edges) == len(ours) + len(our_mentions),
            "triples_in_order": peer_triples == ours,
            "passage_links": peer_mentions == our_mentions,
            "document_content": all(
                ast.literal_eval(a)["content"] == corpus_json[n]
                for n, t, a in zip(nodes["name"], nodes["type"], nodes["attributes"], strict=True)
                if t == "document"
            ),
            "import_gfmrag2_round_trip": back.entities == ents
            and back.relations == sorted(rels)
            and sorted(map(tuple, back.triples.tolist()))
            == sorted((h, back.relations.index(rels[r]), t) for h, r, t in index.triples.tolist())
            and back_links == title_links,
        },
        "sample": [{"triple": i, "glmrag": list(ours[i]), "gfmrag": list(peer_triples[i])} for i in sample],
    }
    text = json.dumps(result, indent=1, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if not all(result["equal"].values()) or skipped.count:
        raise SystemExit("the peer read a different graph: see 'equal'")


if __name__ == "__main__":
    main()
