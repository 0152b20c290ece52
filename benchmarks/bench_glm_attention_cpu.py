"""GLM attention on the CPU: the SDPA path (float mask) against the eager reference, same model, same graph.

The eager backend of ``glmrag.nn.glm.T5GLMEncoder`` runs ``F.scaled_dot_product_attention`` with the graph
bias as a float mask whenever no attention dropout applies; ``eager_graph_attention`` materialises the
(B, H, L, L) scores, masked scores and softmax in float32. Model and graphs as in ``bench_glm_cpu.py``
(random t5-small-size encoder, real Levi graphs with a question of ``--triplets`` triplets, batch 1,
float32, global GLM).

- **Time**: median of ``--repeats`` runs per path after one warm-up, the two paths alternating in one
  process (so machine load hits both alike): an eval forward (retrieval) and a training step (forward and
  backward of ``sum(out^2)``, ``dropout_rate`` 0 so the SDPA path is taken).
- **Peak extra memory**: the resident-set growth during one eval forward / one training step, in a fresh
  subprocess per cell, measured as in ``bench_glm_cpu.py`` (``VmHWM`` reset before the step).
- **Agreement**: the largest absolute difference of the two outputs.

    python benchmarks/bench_glm_attention_cpu.py --triplets 300 --out benchmarks/results/bench_glm_attention_cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_glm_cpu import MMAP_THRESHOLD, build, model_inputs, proc_status_mib, t5_config  # same folder
from gpu_glm import Graph, levi_layouts

import glmrag.nn.glm as glm_module
from glmrag.io import atomic_write_text
from glmrag.nn.graph_attention import eager_graph_attention

PATHS = ("sdpa", "eager")
STEPS = ("forward", "train_step")


@contextlib.contextmanager
def attention_path(path: str):
    """Within the block the GLM's no-dropout attention is ``path``: the SDPA default or the eager reference."""
    if path == "sdpa":
        yield
        return
    original = glm_module.sdpa_graph_attention
    glm_module.sdpa_graph_attention = lambda q, k, v, bias, scaling: eager_graph_attention(q, k, v, bias, scaling)
    try:
        yield
    finally:
        glm_module.sdpa_graph_attention = original


def run_step(model, inputs: dict[str, torch.Tensor], step: str, path: str) -> torch.Tensor:
    with attention_path(path):
        if step == "forward":
            with torch.no_grad():
                return model.eval()(**inputs)
        model.train().zero_grad(set_to_none=True)
        out = model(**inputs)
        out.pow(2).sum().backward()
        return out.detach()


def memory_cell(path: str, step: str, graph_file: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    graph = Graph(**torch.load(graph_file))
    model = build("glm", t5_config())
    run_step(model, model_inputs(graph, 16), step, path)
    inputs = model_inputs(graph)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = proc_status_mib("VmRSS")
    run_step(model, inputs, step, path)
    return {"peak_extra_mib": round(proc_status_mib("VmHWM") - before)}


def run_memory_cell(path: str, step: str, graph_file: str, threads: int) -> dict:
    command = [sys.executable, __file__, "--cell", path, step, "--graph", graph_file, "--threads", str(threads)]
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        return {"error": done.stderr[-1000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triplets", type=int, nargs="+", default=[300])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--cell", nargs=2, help=argparse.SUPPRESS)  # internal: path, step of one memory cell
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(memory_cell(*args.cell, args.graph, args.threads)))
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build("glm", t5_config())
    result = {"model": "t5-small size, random, global GLM, float32, batch 1", "torch_threads": args.threads}
    result |= {"load_average_1min_start": round(os.getloadavg()[0], 2), "cells": []}
    with tempfile.TemporaryDirectory() as tmp:
        for triplets, layout in levi_layouts(args.triplets):
            graph = Graph.from_layout(layout, triplets, "triple")
            torch.save(vars(graph), graph_file := str(Path(tmp) / f"graph_{triplets}.pt"))
            result["cells"].append(measure_cell(model, graph, graph_file, args.repeats, args.threads))
            print(json.dumps(result["cells"][-1]), flush=True)
    print(text := json.dumps(result, indent=2))
    if args.out:
        atomic_write_text(args.out, text + "\n")


def measure_cell(model, graph: Graph, graph_file: str, repeats: int, threads: int) -> dict:
    """Agreement, alternating timings and fresh-process memory of both paths on one graph."""
    inputs = model_inputs(graph)
    outputs = {p: run_step(model, inputs, "forward", p) for p in PATHS}  # also the warm-up
    cell = {"triplets": graph.triplets, "tokens": graph.tokens}
    cell["max_abs_diff"] = float((outputs["sdpa"] - outputs["eager"]).abs().max())
    for step in STEPS:
        times: dict[str, list[float]] = {p: [] for p in PATHS}
        for i in range(repeats):
            for p in PATHS[:: 1 if i % 2 == 0 else -1]:
                start = time.perf_counter()
                run_step(model, inputs, step, p)
                times[p].append(1000 * (time.perf_counter() - start))
        median = {p: round(statistics.median(t), 1) for p, t in times.items()}
        memory = {p: run_memory_cell(p, step, graph_file, threads) for p in PATHS}
        cell[step] = {"ms": median, "eager_over_sdpa": round(median["eager"] / median["sdpa"], 2)}
        cell[step]["peak_extra_mib"] = {p: memory[p].get("peak_extra_mib", memory[p]) for p in PATHS}
    return cell


if __name__ == "__main__":
    main()
