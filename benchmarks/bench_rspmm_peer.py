"""glmrag's rspmm against GFM-RAG's C++ ``rspmm``, side by side in one process, on a KG of 2Wiki-test size.

The peer is GFM-RAG's own extension, built from its public source by its own loader
(``gfmrag/models/ultra/rspmm/rspmm.py``, which compiles ``source/rspmm.cpp`` with torch's ``cpp_extension`` on
import; a C++ compiler and ninja are needed). Nothing of it is copied here: pass a checkout of
https://github.com/RManLuo/gfm-rag with ``--peer``.

Both sum DistMult messages over the same edges with the same values. GFM-RAG writes the rows of
``edge_index[0]`` and reads ``edge_index[1]`` (the transpose of glmrag's convention, ``docs/fidelity.md``), so
the peer gets the edges flipped; the script checks that the two outputs and gradients agree before timing.
The peer is called as GFM-RAG's layer calls it (``generalized_rspmm``, which sorts the edges on every call) and,
as ``peer_kernel``, on edges sorted once (its autograd function alone); glmrag's ``eager`` (the default) and
``compiled`` kernels reuse their per-graph edge orders, as in training. Input layout as GFM-RAG's layer:
``(N, B * H)`` node states and, for the peer, the relations repeated per question, ``(R, B * H)`` (glmrag
reads one ``(R, H)`` copy); the repeated copy is made outside the timed region.

For each batch size: the forward without grad and one forward + backward (a weighted sum as the loss), each a
warm-up then the median of ``--repeats`` runs, CPU seconds of the process (one thread) and the peak extra
resident memory of the stage (``VmHWM`` after a reset; see ``bench_gnn_cpu.py``).

Run: ``PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_rspmm_peer.py --peer /path/to/gfm-rag``
(a few minutes; the first call compiles the peer, about 25 s). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gnn_cpu import EMBED_DIM, ENTITIES, PASSAGES, RELATIONS, TRIPLES, measured, random_graph_inputs  # noqa: E402

from glmrag.index.synthetic import power_law_index  # noqa: E402
from glmrag.nn import rspmm as ours  # noqa: E402

PEER_MODULE = Path("gfmrag/models/ultra/rspmm/rspmm.py")


def load_peer(checkout: Path):
    """GFM-RAG's ``rspmm`` module from ``checkout``, run by its own code (it builds the extension on import)."""
    path = checkout / PEER_MODULE
    if not path.is_file():
        raise SystemExit(f"--peer {checkout}: no {PEER_MODULE} there; pass a checkout of RManLuo/gfm-rag")
    spec = importlib.util.spec_from_file_location("gfmrag_rspmm", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the peer's module looks itself up there
    spec.loader.exec_module(module)
    return module


def systems(peer, edge_index: torch.Tensor, edge_type: torch.Tensor, num_nodes: int) -> dict:
    """Name -> ``f(x (N, B*H), relation (R, H), repeated (R, B*H), batch) -> (N, B*H)``, every one with autograd:
    the peer reads the relations repeated per question (as GFM-RAG's layer passes them), glmrag once."""
    flipped = edge_index.flip(0)  # the peer's rows are edge_index[0]
    weight = torch.ones(edge_type.numel())
    key = flipped[0] * num_nodes + flipped[1]
    order = key.argsort()
    sorted_index, sorted_type, sorted_weight = flipped[:, order], edge_type[order], weight[order]

    def ours_with(kernel: str):
        def run(x, relation, repeated, batch):
            h = x.view(x.shape[0], batch, -1)  # (N, B, H)
            return ours.rspmm(h, relation, edge_index, edge_type, kernel=kernel).view_as(x)

        return run

    def peer_layer(x, relation, repeated, batch):
        return peer.generalized_rspmm(flipped, edge_type, weight, repeated, x, sum="add", mul="mul")

    def peer_kernel(x, relation, repeated, batch):
        return peer.RSPMMAddMulFunction.apply(sorted_index, sorted_type, sorted_weight, repeated, x)

    return {
        "peer": peer_layer,
        "peer_kernel": peer_kernel,
        "eager": ours_with("eager"),
        "compiled": ours_with("compiled"),
    }


def check_agreement(runs: dict, x, relation, batch: int) -> dict:
    """Largest absolute difference of every system's output and gradients from the peer's."""
    results = {}
    for name, run in runs.items():
        xs, rs = x.detach().requires_grad_(), relation.detach().requires_grad_()
        repeated = rs.repeat(1, batch)  # (R, B*H): its gradient sums the B copies back into rs
        out = run(xs, rs, repeated, batch)
        out.backward(torch.ones_like(out))
        results[name] = (out.detach(), xs.grad, rs.grad)
    ref = results["peer"]
    return {
        name: max(float((a - b).abs().max()) for a, b in zip(got, ref, strict=True)) for name, got in results.items()
    }


def timed(run, x, relation, batch: int, backward: bool, repeats: int) -> dict:
    repeated = relation.repeat(1, batch)  # the peer's layout, made outside the timing as GFM-RAG's layer has it

    def once():
        if not backward:
            with torch.no_grad():
                return run(x, relation, repeated, batch)
        xs, rs, reps = (t.detach().requires_grad_() for t in (x, relation, repeated))
        out = run(xs, rs, reps, batch)
        out.backward(torch.ones_like(out))
        return out

    measured(once)  # warm-up: the compiled kernel compiles, glmrag sorts its edges once per graph
    stages = [measured(once) for _ in range(repeats)]
    return {
        "cpu_s": round(statistics.median(s.cpu_s for s in stages), 3),
        "wall_s": round(statistics.median(s.wall_s for s in stages), 3),
        "peak_extra_mib": round(max(s.peak_extra_mib for s in stages)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", type=Path, required=True, help="a checkout of RManLuo/gfm-rag")
    parser.add_argument("--hidden", type=int, default=512, help="GLM-RAG Table 14: 512")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--systems", nargs="+", default=["peer", "peer_kernel", "eager", "compiled"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    peer = load_peer(args.peer)
    index = power_law_index(ENTITIES, TRIPLES, RELATIONS, PASSAGES)
    graph = random_graph_inputs(index, EMBED_DIM)
    runs = systems(peer, graph.edge_index, graph.edge_type, graph.num_nodes)
    runs = {name: runs[name] for name in args.systems}
    types = int(graph.edge_type.max()) + 1
    result = {
        "graph": {"entities": graph.num_nodes, "edges": graph.num_edges, "edge_types": types},
        "hidden": args.hidden,
        "torch_threads": torch.get_num_threads(),
        "load_average_1min_start": round(os.getloadavg()[0], 2),
    }
    small = torch.arange(graph.num_edges) % 97 == 0  # agreement on a sub-graph: the peer's backward is slow
    check_runs = systems(peer, graph.edge_index[:, small], graph.edge_type[small], graph.num_nodes)
    for batch in args.batches:
        x = torch.randn(graph.num_nodes, batch * args.hidden)
        relation = torch.randn(types, args.hidden)
        result[f"batch_{batch}"] = by_batch = {
            "max_abs_diff_from_peer": check_agreement({n: check_runs[n] for n in runs}, x, relation, batch)
        }
        for name, run in runs.items():
            by_batch[name] = {
                "forward": timed(run, x, relation, batch, backward=False, repeats=args.repeats),
                "forward_backward": timed(run, x, relation, batch, backward=True, repeats=args.repeats),
            }
            print(json.dumps({f"batch_{batch}": {name: by_batch[name]}}), flush=True)
    result["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
