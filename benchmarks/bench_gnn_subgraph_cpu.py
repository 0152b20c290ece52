"""Forward time of GFM-RAG* restricted to the GLM's subgraphs against the whole-KG GNN, on musique100, CPU.

GLM-RAG §5.5, Table 3 restricts GFM-RAG* to at most 600 / 500 / 400 / 300
triplets of each question's 2-hop subgraph. The restricted GNN runs on the
disjoint union of the batch's subgraphs (:class:`glmrag.nn.subgraph_batch.SubgraphBatch`),
so its cost follows the subgraph sizes instead of the KG's. Both forwards run
in this process on the same questions, weights and threads, interleaved
(whole KG, then each budget, per repeat), and the ratio of medians is reported;
GLM-RAG Table 14 sizes: hidden 512, 6 layers, batch 4.

The index is musique100's OpenIE KG from the cache eval.py uses (built on the
first run: minutes). The batch is the first questions whose 2-hop
neighbourhood exceeds the largest budget, so the budgets select different
subgraphs. Relation features are random unit vectors unless
``--embed`` asks for the cached MiniLM embeddings (values do not change the
cost). Subgraph selection (:func:`glmrag.models.gnn_module.question_subgraphs`,
the GLM's call) is timed apart from the forward: the module selects each
question once and caches it.

Run: ``python benchmarks/bench_gnn_subgraph_cpu.py --threads 1 [--batch 4 --repeats 3] [hydra overrides]``
(one thread: on a shared, loaded CPU the restricted forward's many small ops otherwise wait on thread
hand-offs; about 4 min on two busy cores, mostly the whole-KG forwards).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from glmrag.data.registry import load_dataset
from glmrag.datamodules.glm_inputs import SubgraphSettings
from glmrag.datamodules.gnn_input_cache import cached_graph_inputs
from glmrag.index.cache import get_index
from glmrag.jobs import config_path  # noqa: F401  (registers the resolvers and schemas the configs use)
from glmrag.models.gnn_module import question_subgraphs, subgraph_batch
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.graph_inputs import graph_inputs, seed_weights

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
EMBED_DIM = 384  # MiniLM
BUDGETS = (600, 300)  # GLM-RAG Table 3's largest and smallest budgets


class RandomEncoder:
    """Random unit vectors: the relation features' values do not change the cost."""

    def encode(self, texts):
        gen = torch.Generator().manual_seed(0)
        return torch.nn.functional.normalize(torch.randn(len(texts), EMBED_DIM, generator=gen), dim=-1).numpy()


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512, help="GLM-RAG Table 14: 512")
    parser.add_argument("--layers", type=int, default=6, help="GLM-RAG Table 14: 6")
    parser.add_argument("--batch", type=int, default=4, help="questions per forward (GLM-RAG Table 14: 4)")
    parser.add_argument("--repeats", type=int, default=3, help="timed forwards of each kind after one warm-up")
    parser.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS), help="max_triplets values")
    parser.add_argument("--embed", action="store_true", help="MiniLM relation features (cached; slow once)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args, overrides = parser.parse_known_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=["data=musique100", *overrides, "output_dir=unused"])

    t = time.perf_counter()
    dataset = load_dataset(cfg.data.name, root=cfg.data.root)  # every split: the KG indexes them all
    index = get_index(dataset, cfg.index)
    embed = cfg.index.embed_model
    graph = cached_graph_inputs(index, embed) if args.embed else graph_inputs(index, RandomEncoder(), False)
    questions = list(dataset.qa)
    build_s = time.perf_counter() - t

    # Which questions: the budget must bind, or every budget reads the same subgraph. The batch is the first
    # questions whose 2-hop neighbourhood exceeds the largest budget (the most expensive restricted case).
    t = time.perf_counter()
    largest = question_subgraphs(index, [q.id for q in questions], SubgraphSettings(max_triplets=max(args.budgets)))
    select_all_s = time.perf_counter() - t
    binding = [q.id for q, s in zip(questions, largest, strict=True) if s.truncated]
    ids = (binding + [q.id for q, s in zip(questions, largest, strict=True) if not s.truncated])[: args.batch]

    torch.manual_seed(0)
    config = GNNConfig(
        hidden_channels=args.hidden, num_layers=args.layers, relation_dim=graph.relation_features.shape[1]
    )
    model = QueryGNN(config).eval()
    query = torch.nn.functional.normalize(torch.randn(len(ids), config.question_dim), dim=-1)
    weight = seed_weights(index, ids)

    budgets = {}
    for budget in args.budgets:
        settings = SubgraphSettings(max_triplets=budget)  # GLM-RAG App. C: 2 hops, subgraph seed 0
        t = time.perf_counter()
        subs = question_subgraphs(index, ids, settings)
        batch = subgraph_batch(index, subs)
        select_s = time.perf_counter() - t
        budgets[budget] = {"batch": batch, "select_s": select_s, "subs": subs, "times": []}

    whole_times = []
    with torch.no_grad():
        whole = model(graph, query, weight)  # warm-up
        for b in budgets.values():
            restricted = model(graph, query, weight, subgraphs=b["batch"])
            # the restricted GNN scores exactly the subgraph entities (-inf elsewhere)
            assert torch.equal(torch.isfinite(restricted), b["batch"].entity_mask(graph.num_nodes))
        for _ in range(args.repeats):
            whole_times.append(timed(lambda: model(graph, query, weight)))
            for b in budgets.values():
                b["times"].append(timed(lambda b=b: model(graph, query, weight, subgraphs=b["batch"])))
    assert whole.shape == (len(ids), graph.num_nodes) and torch.isfinite(whole).all()

    whole_s = statistics.median(whole_times)
    result = {
        "graph": {
            "dataset": cfg.data.name,
            "entities": graph.num_nodes,
            "edges_both_directions": graph.num_edges,
            "edge_types": 2 * graph.num_relations,
            "build_s": round(build_s, 1),
        },
        "model": {"hidden_channels": args.hidden, "num_layers": args.layers},
        "questions": {
            "count": len(questions),
            "without_seeds": sum(not index.seeds(q.id) for q in questions),
            f"neighbourhood_over_{max(args.budgets)}_triplets": len(binding),
            f"mean_triplets_at_{max(args.budgets)}": round(statistics.mean(len(s) for s in largest), 1),
            "select_all_s": round(select_all_s, 3),
        },
        "batch": len(ids),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "whole_kg_forward_s": [round(x, 3) for x in whole_times],
        "whole_kg_forward_median_s": round(whole_s, 3),
        "restricted": {},
    }
    for budget, b in budgets.items():
        median = statistics.median(b["times"])
        result["restricted"][f"max_triplets={budget}"] = {
            "triples_per_question": [len(s) for s in b["subs"]],
            "entities_per_question": [len(s.entities) for s in b["subs"]],
            "truncated": sum(s.truncated for s in b["subs"]),
            "select_s": round(b["select_s"], 4),
            "forward_s": [round(x, 4) for x in b["times"]],
            "forward_median_s": round(median, 4),
            "ratio_restricted_to_whole": round(median / whole_s, 4),
            "speedup": round(whole_s / median, 1),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
