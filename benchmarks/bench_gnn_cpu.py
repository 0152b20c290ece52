"""Forward latency and peak memory of the GFM-RAG QueryGNN on a KG of 2Wiki-test size, on the CPU.

GLM-RAG Table 11: the 2Wiki test KG has 48,779 entities, 20,748 relations,
160,950 triples and 6,119 documents; Table 14: hidden size 512, 6 layers. The
graph is :func:`glmrag.index.synthetic.power_law_index`; the relation features
are random unit vectors unless ``--embed`` asks for MiniLM embeddings of the
names (the values do not change the cost).

Peak memory is the growth of the process's maximum resident set size
(``resource.getrusage``) over what the graph and the model already held:
tracemalloc does not see PyTorch's allocations. Each measured stage must use
more memory than the stages before it, so inference runs before training.

Run: ``python benchmarks/bench_gnn_cpu.py`` (about 80 s on two busy cores: a
warm-up and two timed forwards of ~20 s each); ``--train`` adds one forward +
backward step (about 70 s and 12 GiB more at B = 1).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

import torch

from glmrag.index.synthetic import power_law_index, random_questions
from glmrag.models.losses import gfm_rag_loss
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.graph_inputs import GraphInputs, graph_inputs, seed_weights

# GLM-RAG Table 11, 2Wiki (test)
ENTITIES, RELATIONS, TRIPLES, PASSAGES = 48_779, 20_748, 160_950, 6_119
EMBED_DIM = 384  # MiniLM


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def random_graph_inputs(index, dim: int, seed: int = 0) -> GraphInputs:
    """graph_inputs with random unit relation features instead of sentence embeddings."""

    class RandomEncoder:
        def encode(self, texts):
            gen = torch.Generator().manual_seed(seed)
            return torch.nn.functional.normalize(torch.randn(len(texts), dim, generator=gen), dim=-1).numpy()

    return graph_inputs(index, RandomEncoder(), node_features=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512, help="GLM-RAG Table 14: 512")
    parser.add_argument("--layers", type=int, default=6, help="GLM-RAG Table 14: 6")
    parser.add_argument("--batch", type=int, default=1, help="questions per forward")
    parser.add_argument("--repeats", type=int, default=2, help="timed forwards after one warm-up")
    parser.add_argument("--train", action="store_true", help="also time one forward + backward step")
    parser.add_argument("--embed", action="store_true", help="embed relation names with MiniLM (slow)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    t = time.perf_counter()
    index = power_law_index(ENTITIES, TRIPLES, RELATIONS, PASSAGES)
    questions = random_questions(index, args.batch)
    if args.embed:
        graph = graph_inputs(index, node_features=False)
    else:
        graph = random_graph_inputs(index, EMBED_DIM)
    build_s = time.perf_counter() - t

    config = GNNConfig(hidden_channels=args.hidden, num_layers=args.layers)
    model = QueryGNN(config).eval()
    query = torch.nn.functional.normalize(torch.randn(args.batch, config.question_dim), dim=-1)
    weight = seed_weights(index, [q.id for q in questions])
    rss_before = max_rss_mib()

    with torch.no_grad():
        t = time.perf_counter()
        model(graph, query, weight)
        warmup_s = time.perf_counter() - t
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            logits = model(graph, query, weight)
            times.append(time.perf_counter() - t)
    rss_forward = max_rss_mib()
    assert logits.shape == (args.batch, ENTITIES) and torch.isfinite(logits).all()

    # (2T, B, H) float32 messages, the largest tensor of a layer
    message_mib = graph.num_edges * args.batch * args.hidden * 4 / 2**20
    result = {
        "graph": {
            "entities": graph.num_nodes,
            "edges_both_directions": graph.num_edges,
            "edge_types": 2 * graph.num_relations,
            "build_s": round(build_s, 1),
        },
        "model": {
            "hidden_channels": args.hidden,
            "num_layers": args.layers,
            "parameters": sum(p.numel() for p in model.parameters()),
        },
        "batch": args.batch,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "forward_warmup_s": round(warmup_s, 2),
        "forward_s": [round(x, 2) for x in times],
        "forward_median_s": round(statistics.median(times), 2),
        "rss_before_forward_mib": round(rss_before),
        "forward_peak_extra_mib": round(rss_forward - rss_before),
        "message_tensor_per_layer_mib": round(message_mib),
    }

    if args.train:
        model.train()
        target = torch.zeros(args.batch, ENTITIES)
        target[:, torch.randint(ENTITIES, (4,))] = 1.0
        t = time.perf_counter()
        loss = gfm_rag_loss(model(graph, query, weight), target)
        loss.backward()
        result["train_step_s"] = round(time.perf_counter() - t, 2)
        result["train_step_peak_extra_mib"] = round(max_rss_mib() - rss_before)

    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
