"""GNN retrieval latency and peak memory on one GPU, at 2Wiki-test size (for the H200).

GLM-RAG Table 7 reports 18.6 ms and 1.3 GiB per retrieval for GFM-RAG*; the target here is <= 5 ms and
<= 1.3 GiB on one H200. The graph has the size of the 2Wiki test KG (GLM-RAG Table 11: 48,779 entities,
160,950 triples, 20,748 relations); relation features are random unit vectors (their values do not change
the cost). One cell per hidden size (512 and 2048: GLM-RAG Tables 14 and 18), precision (fp32; bf16 autocast),
aggregation of :class:`~glmrag.nn.gnn_conv.QueryRelationalConv` (``materialized``: the ``(2T, B, H)`` messages
of PyG's gather and scatter; ``fused``: one pass without them; offered when ``GNNConfig`` has an
``aggregation`` field, else one cell of the layer as it is) and mode:

- ``forward``: one question's forward under ``inference_mode``, as a retrieval runs it;
- ``train``: forward and backward of a batch of ``--batch`` questions (a loss over every entity's logit).

Before the cells, ``rspmm_check`` tests the fused sum itself (:mod:`glmrag.nn.rspmm`) on the graph at the first
hidden size and the batch: whether two forward + backward runs give the same bits (``deterministic``; on a
GPU its segment sums, on a CPU ``index_add_``), and under bf16 autocast the largest error of the output and
both gradients relative to the float32 sums of the same bf16 inputs (``bf16_max_rel_err``: rounding the
results to bf16 alone gives up to 2^-8 = 0.0039, bf16's unit roundoff; a sum accumulated in bf16 far more).

Each cell times ``--repeats`` runs after ``--warmup`` (CUDA events on the GPU, wall clock on the CPU) and
reads ``torch.cuda.max_memory_allocated`` over them (graph and weights included, as a retrieval needs
them; ``extra_gib`` is the part above what was allocated before the cell; no memory figures on the CPU).
A cell that fails (model build included) records its error and the run goes on; ``errors`` lists them.

    python benchmarks/gpu_gnn.py --out benchmarks/results/gpu_gnn.json        # the H200, 2Wiki size
    python benchmarks/gpu_gnn.py --size check --out $OUT/gnn.json             # benchmarks/gpu_check.sh
    python benchmarks/gpu_gnn.py --size dry --device cpu                       # CPU proof of the code path

Writes ``--out`` (JSON, rewritten after every cell) and prints it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from gpu_common import error_text, stop_on_sigterm

from glmrag.index.synthetic import power_law_index, random_questions
from glmrag.io import atomic_write_text
from glmrag.nn import gnn_conv, rspmm
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.graph_inputs import GraphInputs, graph_inputs, seed_weights

ENTITIES, RELATIONS, TRIPLES, PASSAGES = 48_779, 20_748, 160_950, 6_119  # GLM-RAG Table 11
EMBED_DIM = 384
AGGREGATIONS = ("materialized", "fused")
MODES = ("forward", "train")
SIZES: dict[str, dict[str, Any]] = {
    "full": {"hidden": [512, 2048], "precision": ["fp32", "bf16"], "modes": list(MODES), "repeats": 20},
    "check": {"hidden": [512, 2048], "precision": ["fp32", "bf16"], "modes": list(MODES), "repeats": 5},
    "dry": {
        "hidden": [16],
        "precision": ["fp32", "bf16"],
        "modes": list(MODES),
        "repeats": 1,
        "warmup": 0,
        "layers": 2,
        "entities": 300,
        "triples": 1_200,
        "relations": 40,
        "passages": 60,
        "batch": 2,
    },
}
"""``--size`` presets: the sweep (``full``), the timed part of ``gpu_check.sh`` (``check``), the CPU dry run."""


def aggregations() -> list[str | None]:
    """The aggregations this checkout's ``GNNConfig`` offers; ``[None]`` (the layer as it is) without the field."""
    if "aggregation" not in {f.name for f in dataclasses.fields(GNNConfig)}:
        return [None]
    return list(getattr(gnn_conv, "AGGREGATIONS", AGGREGATIONS))


def random_graph_inputs(index, dim: int, seed: int = 0) -> GraphInputs:
    """:func:`graph_inputs` with random unit relation features instead of sentence embeddings."""

    class RandomEncoder:
        def encode(self, texts):
            gen = torch.Generator().manual_seed(seed)
            return torch.nn.functional.normalize(torch.randn(len(texts), dim, generator=gen), dim=-1).numpy()

    return graph_inputs(index, RandomEncoder(), node_features=False)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_runs(run, device: torch.device, warmup: int, repeats: int) -> list[float]:
    """Milliseconds of each of ``repeats`` calls of ``run`` after ``warmup`` calls."""
    times = []
    for i in range(warmup + repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            torch.cuda.synchronize(device)
            ms = start.elapsed_time(end)
        else:
            t = time.perf_counter()
            run()
            ms = 1000 * (time.perf_counter() - t)
        if i >= warmup:
            times.append(ms)
    return times


def measure_cell(
    config: GNNConfig, mode: str, precision: str, inputs: dict[str, Any], device: torch.device, args
) -> dict[str, Any]:
    """Build the model of ``config`` and time ``mode``; memory over the timed and warm-up runs (CUDA only)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    model = QueryGNN(config).to(device)
    graph = inputs["graph"]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    if mode == "forward":
        model.eval()
        query, weight = inputs["query"][:1], inputs["weight"][:1]  # one question: a retrieval

        def run() -> None:
            with torch.inference_mode(), autocast:
                model(graph, query, weight)

    else:
        model.train()
        query, weight, target = inputs["query"], inputs["weight"], inputs["target"]

        def run() -> None:
            model.zero_grad(set_to_none=True)
            with autocast:
                logits = model(graph, query, weight)  # (B, E)
            torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), target).backward()

    times = time_runs(run, device, args.warmup, args.repeats)
    cell = {
        "status": "ok",
        "ms_median": round(statistics.median(times), 3),
        "ms_min": round(min(times), 3),
        "ms_all": [round(t, 3) for t in times],
        "questions": len(query),
        "peak_gib": None,
        "extra_gib": None,
    }
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        cell |= {"peak_gib": round(peak / 2**30, 4), "extra_gib": round((peak - base) / 2**30, 4)}
    return cell


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="full", choices=sorted(SIZES), help="preset; the flags below override it")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--hidden", type=int, nargs="+")
    parser.add_argument("--precision", nargs="+", choices=["fp32", "bf16"])
    parser.add_argument("--aggregation", nargs="+", choices=AGGREGATIONS, help="default: every one GNNConfig has")
    parser.add_argument("--modes", nargs="+", choices=MODES)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--batch", type=int, help="questions per train step")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--entities", type=int)
    parser.add_argument("--triples", type=int)
    parser.add_argument("--relations", type=int)
    parser.add_argument("--passages", type=int)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    defaults = {"layers": 6, "batch": 4, "warmup": 2, "entities": ENTITIES, "triples": TRIPLES}
    defaults |= {"relations": RELATIONS, "passages": PASSAGES} | SIZES[args.size]
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.manual_seed(0)
    device = torch.device(args.device)
    offered = aggregations()
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "size": args.size,
        "layers": args.layers,
        "aggregations_offered": offered,
        "args": vars(args),
        "cells": [],
        "errors": [],
    }

    def save() -> None:
        if args.out:
            atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")

    def stopped(signum: int) -> None:
        result["errors"].append({"where": "time limit", "error": f"stopped by signal {signum}"})
        save()

    with stop_on_sigterm(stopped):
        return measure_all(args, device, result, save)


def measure_all(
    args: argparse.Namespace, device: torch.device, result: dict[str, Any], save: Callable[[], None]
) -> dict[str, Any]:
    """Build the graph, then every cell into ``result`` (saved after each); errors are recorded, not raised."""
    try:
        start = time.perf_counter()
        index = power_law_index(args.entities, args.triples, args.relations, args.passages)
        questions = random_questions(index, args.batch)
        g = torch.Generator().manual_seed(0)
        inputs = {
            "graph": random_graph_inputs(index, EMBED_DIM).to(device),
            "weight": seed_weights(index, [q.id for q in questions]).to(device),  # (B, E)
            "query": torch.nn.functional.normalize(torch.randn(args.batch, EMBED_DIM, generator=g), dim=-1).to(device),
            "target": (torch.rand(args.batch, index.num_entities, generator=g) < 0.001).float().to(device),
        }
        result["graph"] = {"entities": index.num_entities, "edges_both_directions": int(inputs["graph"].num_edges)}
        result["graph_build_s"] = round(time.perf_counter() - start, 2)
    except Exception as err:  # nothing to measure, but the JSON says why
        result["errors"].append({"where": "graph", "error": error_text(err)})
        save()
        return result
    try:
        result["rspmm_check"] = rspmm_check(inputs["graph"], args.hidden[0], args.batch, device)
    except Exception as err:
        result["errors"].append({"where": "rspmm_check", "error": error_text(err)})
    save()

    chosen = args.aggregation or result["aggregations_offered"]
    for hidden in args.hidden:
        for aggregation in chosen:
            for precision in args.precision:
                for mode in args.modes:
                    cell = {"hidden_channels": hidden, "aggregation": aggregation, "precision": precision, "mode": mode}
                    try:
                        extra = {} if aggregation is None else {"aggregation": aggregation}
                        config = GNNConfig(hidden_channels=hidden, num_layers=args.layers, **extra)
                        cell |= measure_cell(config, mode, precision, inputs, device, args)
                    except torch.OutOfMemoryError:
                        cell["status"] = "OOM"
                    except Exception as err:  # a failed cell must not cost the others
                        cell["status"] = "error"
                        cell["error"] = error_text(err)
                        result["errors"].append(
                            {
                                "where": {k: cell[k] for k in ("hidden_channels", "aggregation", "precision", "mode")},
                                "error": cell["error"],
                            }
                        )
                    result["cells"].append(cell)
                    print(json.dumps({k: v for k, v in cell.items() if k != "ms_all"}), flush=True)
                    save()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
    save()
    return result


def rspmm_check(graph: GraphInputs, hidden: int, batch: int, device: torch.device) -> dict[str, Any]:
    """Determinism and bf16 accuracy of the fused sum on ``graph`` (see the module docstring)."""
    g = torch.Generator().manual_seed(1)
    types = int(graph.edge_type.max()) + 1
    # positive values, exact in bf16: no cancellation, so every element's relative error means something
    x = torch.rand(graph.num_nodes, batch, hidden, generator=g).bfloat16().float().to(device)
    relation = torch.rand(types, hidden, generator=g).bfloat16().float().to(device)
    weight = torch.rand(graph.num_nodes, batch, hidden, generator=g).bfloat16().float().to(device)

    def run(x: torch.Tensor, relation: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, relation = x.detach().requires_grad_(), relation.detach().requires_grad_()
        out = rspmm.rspmm(x, relation, graph.edge_index, graph.edge_type)
        return (out.detach(), *torch.autograd.grad((out * weight.to(out.dtype)).sum(), (x, relation)))

    first, second = run(x, relation), run(x, relation)
    narrow = (x.bfloat16(), relation.bfloat16())
    with torch.autocast(device.type, dtype=torch.bfloat16):
        got = run(*narrow)
    ref = run(*(t.float() for t in narrow))
    errors = [float(((a.float() - b).abs() / b.abs().clamp_min(1e-6)).max()) for a, b in zip(got, ref, strict=True)]
    return {
        "segment_sum": rspmm.SEGMENT_SUM.get(device.type, "segment"),
        "deterministic": all(torch.equal(a, b) for a, b in zip(first, second, strict=True)),
        "bf16_max_rel_err": {
            name: round(e, 5) for name, e in zip(("out", "grad_x", "grad_relation"), errors, strict=True)
        },
    }


if __name__ == "__main__":
    raise SystemExit(1 if main()["errors"] else 0)
