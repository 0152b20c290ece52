"""GNN retrieval latency and peak memory on one GPU, at 2Wiki-test size (for the H200).

GLM-RAG Table 7 reports 18.6 ms and 1.3 GiB per retrieval for GFM-RAG*; the
target here is <= 5 ms and <= 1.3 GiB on one H200. The graph has the size of
the 2Wiki test KG (GLM-RAG Table 11: 48,779 entities, 160,950 triples, 20,748
relations); relation features are random unit vectors (their values do not
change the cost). For each hidden size (512 and 2048: GLM-RAG Tables 14 and 18)
and precision it times ``--repeats`` forwards of one question after warm-up with
CUDA events, and reads ``torch.cuda.max_memory_allocated`` over the forward
(graph and weights included, as a retrieval needs them).

    python benchmarks/gpu_gnn.py --out benchmarks/results/gpu_gnn.json
    python benchmarks/gpu_gnn.py --device cpu --entities 2000 --triples 6000   # smoke test without a GPU

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from bench_gnn_cpu import random_graph_inputs  # same folder: run as python benchmarks/gpu_gnn.py

from glmrag.index.synthetic import power_law_index, random_questions
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.graph_inputs import seed_weights

ENTITIES, RELATIONS, TRIPLES, PASSAGES = 48_779, 20_748, 160_950, 6_119  # GLM-RAG Table 11
EMBED_DIM = 384


def time_forward(model, graph, query, weight, device: str, repeats: int) -> list[float]:
    """Milliseconds per forward, after two warm-up calls."""
    times = []
    with torch.inference_mode():
        for i in range(repeats + 2):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(graph, query, weight)
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end)
            else:
                t = time.perf_counter()
                model(graph, query, weight)
                ms = 1000 * (time.perf_counter() - t)
            if i >= 2:
                times.append(ms)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--hidden", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--entities", type=int, default=ENTITIES)
    parser.add_argument("--triples", type=int, default=TRIPLES)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)

    index = power_law_index(args.entities, args.triples, RELATIONS, PASSAGES)
    questions = random_questions(index, 1)
    graph = random_graph_inputs(index, EMBED_DIM).to(args.device)
    weight = seed_weights(index, [q.id for q in questions]).to(args.device)
    query = torch.nn.functional.normalize(torch.randn(1, EMBED_DIM, device=args.device), dim=-1)
    rows = []
    for hidden in args.hidden:
        for precision in args.precision:
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            model = QueryGNN(GNNConfig(hidden_channels=hidden, num_layers=args.layers)).to(args.device).eval()
            if args.device == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            with torch.autocast(args.device, dtype=dtype, enabled=precision == "bf16"):
                times = time_forward(model, graph, query, weight, args.device, args.repeats)
            peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None
            rows.append(
                {
                    "hidden_channels": hidden,
                    "precision": precision,
                    "forward_ms_median": round(statistics.median(times), 2),
                    "forward_ms_min": round(min(times), 2),
                    "peak_gib": None if peak is None else round(peak, 3),
                }
            )
            del model
    result = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "graph": {"entities": graph.num_nodes, "edges_both_directions": graph.num_edges},
        "layers": args.layers,
        "batch": 1,
        "runs": rows,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
