"""Latency and peak memory of the GFM-RAG QueryGNN on a KG of 2Wiki-test size, on the CPU, per aggregation.

GLM-RAG Table 11: the 2Wiki test KG has 48,779 entities, 20,748 relations,
160,950 triples and 6,119 documents; Table 14: hidden size 512, 6 layers. The
graph is :func:`glmrag.index.synthetic.power_law_index`; the relation features
are random unit vectors unless ``--embed`` asks for MiniLM embeddings of the
names (the values do not change the cost).

Each ``--aggregations`` entry (``fused``: :mod:`glmrag.nn.rspmm`; ``materialized``: PyG messages, the
reference) gets the same weights and is measured for: the inference forward (a warm-up and ``--repeats``
timed), one layer's aggregation alone (``propagate``, no grad, median of 3 after a warm-up), and with
``--train`` one forward + backward step. The relation MLPs of the layers (one per layer over all 2R relation
features, independent of the question) are timed on their own, forward and forward + backward.

Peak memory of a stage is the peak resident set size during it (``VmHWM``, reset through
``/proc/self/clear_refs`` before the stage) minus the resident size at its start, after ``gc`` and
``malloc_trim`` (tracemalloc does not see PyTorch's allocations); so stages can run in any order. Times are
wall seconds and, as ``*_cpu_s``, CPU seconds of the process, which a shared machine disturbs less.

``--compiled`` adds the fused aggregation (and with ``--train`` the training step) with rspmm's
``torch.compile`` kernel.

Run: ``python benchmarks/bench_gnn_cpu.py --threads 1`` (about 4 minutes on one core); ``--train`` adds a
training step per aggregation (at B = 1 about 70 s and 3.4 GiB fused, 100 s and 12 GiB materialised;
``benchmarks/scaling.md``). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import gc
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from glmrag.index.synthetic import power_law_index, random_questions
from glmrag.models.losses import gfm_rag_loss
from glmrag.nn import rspmm
from glmrag.nn.fixed_cache import NoGradCache
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.gnn_conv import AGGREGATIONS
from glmrag.nn.graph_inputs import GraphInputs, graph_inputs, seed_weights

# GLM-RAG Table 11, 2Wiki (test)
ENTITIES, RELATIONS, TRIPLES, PASSAGES = 48_779, 20_748, 160_950, 6_119
EMBED_DIM = 384  # MiniLM


def rss_mib(field: str = "VmRSS") -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the last :func:`reset_peak`) of this process, MiB."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(field + ":"))
    return int(line.split()[1]) / 1024  # kB


def reset_peak() -> float:
    """Free what can be freed, reset the peak RSS to the current RSS, and return it (MiB)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Linux: reset VmHWM
    return rss_mib()


class Stage(NamedTuple):
    wall_s: float
    cpu_s: float
    """CPU seconds of this process (``time.process_time``): with one thread, less sensitive to a busy machine."""
    peak_extra_mib: float
    out: object


def measured(fn: Callable[[], object]) -> Stage:
    """Wall and CPU seconds, peak extra MiB and result of ``fn()``."""
    start_mib = reset_peak()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return Stage(wall, cpu, rss_mib("VmHWM") - start_mib, out)


def random_graph_inputs(index, dim: int, seed: int = 0) -> GraphInputs:
    """graph_inputs with random unit relation features instead of sentence embeddings."""

    class RandomEncoder:
        def encode(self, texts):
            gen = torch.Generator().manual_seed(seed)
            return torch.nn.functional.normalize(torch.randn(len(texts), dim, generator=gen), dim=-1).numpy()

    return graph_inputs(index, RandomEncoder(), node_features=False)


def inference(model: QueryGNN, graph: GraphInputs, query, weight, repeats: int) -> dict:
    """A warm-up and ``repeats`` timed forwards without grad, as an evaluation runs them (the relation MLPs'
    outputs computed at the first question of a graph and reused, :mod:`glmrag.nn.fixed_cache`), then
    ``repeats`` more with those caches emptied before each (``*_uncached``: every forward as before the cache);
    peak extra memory over each set."""

    def forward():
        with torch.no_grad():
            logits = model(graph, query, weight)
        assert torch.isfinite(logits).all()

    caches = [m.relation_cache for m in model.modules() if isinstance(getattr(m, "relation_cache", None), NoGradCache)]

    def uncached():
        for cache in caches:
            cache.clear()
        forward()

    warmup = measured(forward)
    stages = [measured(forward) for _ in range(repeats)]
    cache_mib = sum(cache.nbytes for cache in caches) / 2**20  # held between forwards, so in no stage's peak
    cold = [measured(uncached) for _ in range(repeats)]
    return {
        "forward_warmup_s": round(warmup.wall_s, 2),
        "forward_s": [round(s.wall_s, 2) for s in stages],
        "forward_median_s": round(statistics.median(s.wall_s for s in stages), 2),
        "forward_median_cpu_s": round(statistics.median(s.cpu_s for s in stages), 2),
        "forward_peak_extra_mib": round(max(s.peak_extra_mib for s in [warmup, *stages])),
        "relation_cache_mib": round(cache_mib),
        "forward_uncached_median_cpu_s": round(statistics.median(s.cpu_s for s in cold), 2),
        "forward_uncached_peak_extra_mib": round(max(s.peak_extra_mib for s in cold)),
    }


def aggregation_alone(model: QueryGNN, graph: GraphInputs, batch: int, kernel: str = "eager") -> dict:
    """The first layer's ``propagate`` (messages and sum, no update) on random states, no grad; ``kernel``
    is rspmm's (fused only). The warm-up (the cached sort of the edges; compiling) is timed on its own."""
    conv = model.convs[0]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(graph.num_nodes, batch, conv.hidden_channels, generator=gen)  # (E, B, H)
    with torch.no_grad():
        relation = conv.relation_proj(model.relation_proj(graph.relation_features))  # (2R, H)

        def run():
            with kernel_default(kernel):
                conv.propagate(graph.edge_index, x=x, relation=relation, edge_type=graph.edge_type)

        warmup = measured(run)
        stages = [measured(run) for _ in range(3)]
    suffix = "" if kernel == "eager" else f"_{kernel}"
    return {
        f"aggregation_warmup_s{suffix}": round(warmup.wall_s, 3),
        f"aggregation_s{suffix}": round(statistics.median(s.wall_s for s in stages), 3),
        f"aggregation_cpu_s{suffix}": round(statistics.median(s.cpu_s for s in stages), 3),
        f"aggregation_peak_extra_mib{suffix}": round(max(s.peak_extra_mib for s in stages)),
    }


def compile_backward(batch: int, hidden: int) -> float:
    """Seconds to compile rspmm's backward kernels on a tiny graph, so that a timed step does not compile."""
    t = time.perf_counter()
    x = torch.randn(5, batch, hidden, requires_grad=True)
    relation = torch.randn(3, hidden, requires_grad=True)
    edge_index, edge_type = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 3]]), torch.tensor([0, 1, 2, 1])
    rspmm.rspmm(x, relation, edge_index, edge_type).sum().backward()
    return round(time.perf_counter() - t, 2)


@contextlib.contextmanager
def kernel_default(kernel: str):
    """Make ``kernel`` rspmm's default inside the block."""
    old, rspmm.KERNEL = rspmm.KERNEL, kernel
    try:
        yield
    finally:
        rspmm.KERNEL = old


def train_step(model: QueryGNN, graph: GraphInputs, query, weight, target) -> dict:
    """One forward + backward of the GFM-RAG loss: seconds, peak extra memory, what autograd kept, loss."""
    model.train()
    model.zero_grad(set_to_none=True)
    saved: dict[int, int] = {}  # storage address -> bytes, of the tensors autograd keeps for backward

    def keep(t: torch.Tensor) -> torch.Tensor:
        saved.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        return t

    def run():
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            loss = gfm_rag_loss(model(graph, query, weight), target)
        loss.backward()
        return loss.item()

    stage = measured(run)
    model.zero_grad(set_to_none=True)
    model.eval()
    return {
        "train_step_s": round(stage.wall_s, 2),
        "train_step_cpu_s": round(stage.cpu_s, 2),
        "train_step_peak_extra_mib": round(stage.peak_extra_mib),
        "saved_for_backward_mib": round(sum(saved.values()) / 2**20),
        "train_loss": round(stage.out, 6),
    }


def relation_mlps(model: QueryGNN, graph: GraphInputs) -> dict:
    """The per-layer relation MLPs alone, CPU ms: once per forward (no grad) and forward + backward."""
    features = graph.relation_features

    def forward():
        relation = model.relation_proj(features)  # (2R, H)
        return [conv.relation_proj(relation) for conv in model.convs]

    with torch.no_grad():
        forward()
        no_grad = [measured(forward) for _ in range(2)]

    def train():
        outs = forward()
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])

    trained = measured(train)
    model.zero_grad(set_to_none=True)
    return {
        "rows": features.shape[0],
        "forward_ms": round(statistics.median(s.wall_s for s in no_grad) * 1e3),
        "forward_cpu_ms": round(statistics.median(s.cpu_s for s in no_grad) * 1e3),
        "forward_backward_ms": round(trained.wall_s * 1e3),
        "forward_backward_cpu_ms": round(trained.cpu_s * 1e3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512, help="GLM-RAG Table 14: 512")
    parser.add_argument("--layers", type=int, default=6, help="GLM-RAG Table 14: 6")
    parser.add_argument("--batch", type=int, default=1, help="questions per forward")
    parser.add_argument("--repeats", type=int, default=2, help="timed forwards after one warm-up")
    parser.add_argument("--train", action="store_true", help="also time one forward + backward step")
    parser.add_argument("--aggregations", nargs="+", default=list(AGGREGATIONS), choices=AGGREGATIONS)
    parser.add_argument("--compiled", action="store_true", help="fused: also torch.compile rspmm's kernel")
    parser.add_argument("--embed", action="store_true", help="embed relation names with MiniLM (slow)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    t = time.perf_counter()
    index = power_law_index(ENTITIES, TRIPLES, RELATIONS, PASSAGES)
    questions = random_questions(index, args.batch)
    graph = graph_inputs(index, node_features=False) if args.embed else random_graph_inputs(index, EMBED_DIM)
    build_s = time.perf_counter() - t
    config = GNNConfig(hidden_channels=args.hidden, num_layers=args.layers)
    inputs = {
        "graph": graph,
        "query": torch.nn.functional.normalize(torch.randn(args.batch, config.question_dim), dim=-1),
        "weight": seed_weights(index, [q.id for q in questions]),
        "target": torch.zeros(args.batch, ENTITIES).index_fill_(1, torch.randint(ENTITIES, (4,)), 1.0),
    }
    result = {
        "graph": {
            "entities": graph.num_nodes,
            "edges_both_directions": graph.num_edges,
            "edge_types": 2 * graph.num_relations,
            "build_s": round(build_s, 1),
        },
        "model": {"hidden_channels": args.hidden, "num_layers": args.layers},
        "batch": args.batch,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_1min_start": round(os.getloadavg()[0], 2),
        "rss_graph_and_weights_mib": round(rss_mib()),
        # (2T, B, H) float32 messages, the largest tensor of a materialised layer
        "message_tensor_per_layer_mib": round(graph.num_edges * args.batch * args.hidden * 4 / 2**20),
    }
    weights = QueryGNN(config).state_dict()
    for aggregation in args.aggregations:
        model = QueryGNN(dataclasses.replace(config, aggregation=aggregation)).eval()
        model.load_state_dict(weights)
        result["model"]["parameters"] = sum(p.numel() for p in model.parameters())
        result[aggregation] = measure(model, inputs, args)
        print(json.dumps({aggregation: result[aggregation]}), flush=True)
    result["relation_mlps"] = relation_mlps(model, graph)
    add_ratios(result)
    result["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


def measure(model: QueryGNN, inputs: dict, args: argparse.Namespace) -> dict:
    """Every stage of one aggregation: inference, the aggregation alone, a training step; compiled too."""
    graph, query, weight, target = inputs["graph"], inputs["query"], inputs["weight"], inputs["target"]
    row = inference(model, graph, query, weight, args.repeats) | aggregation_alone(model, graph, args.batch)
    if args.train:
        row |= train_step(model, graph, query, weight, target)
    if model.config.aggregation == "fused" and args.compiled:
        row |= aggregation_alone(model, graph, args.batch, kernel="compiled")
        if args.train:
            with kernel_default("compiled"):
                row["compile_backward_s"] = compile_backward(args.batch, args.hidden)
                step = train_step(model, graph, query, weight, target)
            row |= {f"{k}_compiled": v for k, v in step.items()}  # train_step_s_compiled, ...
    return row


def add_ratios(result: dict) -> None:
    """Materialised over fused, and the relation MLPs' share (CPU time) of a forward and of a training step."""
    fused, mat, mlps = result.get("fused"), result.get("materialized"), result["relation_mlps"]
    if fused and mat:
        keys = ["forward_median_s", "forward_median_cpu_s", "forward_peak_extra_mib"]
        keys += ["aggregation_s", "aggregation_cpu_s", "aggregation_s_compiled", "aggregation_cpu_s_compiled"]
        keys += ["train_step_s", "train_step_cpu_s", "train_step_s_compiled", "train_step_cpu_s_compiled"]
        keys += ["train_step_peak_extra_mib", "saved_for_backward_mib"]
        base = {k: k.replace("_compiled", "") for k in keys}
        ratios = {k: mat[base[k]] / fused[k] for k in keys if fused.get(k) and base[k] in mat}
        result["materialized_over_fused"] = {k: round(v, 2) for k, v in ratios.items()}
    for name, row in (("fused", fused), ("materialized", mat)):
        if row:
            forward = row.get("forward_uncached_median_cpu_s", row["forward_median_cpu_s"])  # with the MLPs in it
            mlps[f"share_of_{name}_forward"] = round(mlps["forward_cpu_ms"] / 1e3 / forward, 3)
            if "train_step_cpu_s" in row:
                share = mlps["forward_backward_cpu_ms"] / 1e3 / row["train_step_cpu_s"]
                mlps[f"share_of_{name}_train_step"] = round(share, 3)


if __name__ == "__main__":
    main()
