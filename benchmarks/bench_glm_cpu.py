"""GLM encoder against plain T5 on the CPU: forward latency, peak memory and collate cost on real Levi graphs.

The model: a randomly initialised T5 encoder of t5-small's size (d_model 512, d_ff 2048, 6 layers, 8
heads, d_kv 64) over the MiniLM vocabulary, read either through ``glmrag.nn.glm.T5GLMEncoder`` (eager
backend, global GLM: every pair attends, graph-aware buckets) or as the plain Hugging Face
``T5EncoderModel`` (``attn_implementation="eager"``, T5's text positions) with the same weights and the
same token ids. The inputs: real Levi graphs with a question (``gpu_glm.levi_layouts``: subgraphs of
``--triplets`` triplets selected around three seeds of ``random_kg(20000, 200000)``, laid out with the
MiniLM tokenizer, positions in mode "triple"), batch 1, float32, ``--threads`` torch threads.

- **Latency**: median of ``--repeats`` forwards (no grad, eval) after one warm-up; GLM and plain run in
  the same process, alternating, so load from other processes hits both alike; the ratio is GLM/plain.
  The GLM forward includes turning relative positions and kinds into bucket ids (done per forward in
  production).
- **Peak extra memory**: the growth of the process's resident set during one forward, in a fresh
  subprocess per cell that holds only that model and its inputs and has run one 16-token warm-up forward
  (lazy library buffers). The kernel's high-water mark (``VmHWM``) is reset to the current RSS just
  before the forward (``/proc/self/clear_refs``), and the cell reports ``VmHWM - VmRSS before``: the
  most memory the forward held resident at once (tensors, oneDNN scratch, allocator slack). The
  subprocess runs with a fixed ``MALLOC_MMAP_THRESHOLD_`` so that freed tensors leave the resident set
  at once (glibc's default threshold grows after the first large free and then keeps freed heap chunks
  resident, which makes the figure depend on the order of allocations). Where the reset is refused it
  falls back to the ``ru_maxrss`` delta, which can under-report. Differences below about 20 MiB are noise.
- **Collate cost**: wall time of ``glmrag.graph.levi.graph_positions`` per graph in modes "triple" and
  "path" (median of 3), what ``GLMCollate`` pays per example.

Run (about 2 to 3 minutes on 2 busy cores): ``python benchmarks/bench_glm_cpu.py``. Writes ``--out``
(JSON) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers
from gpu_glm import CONFIGS, KG_SIZE, Graph, levi_layouts  # same folder: run as python benchmarks/bench_glm_cpu.py
from transformers import T5Config, T5EncoderModel

from glmrag.graph.levi import graph_positions
from glmrag.nn.glm import T5GLMEncoder

MODEL = "t5-small"
VOCAB = 30522  # the MiniLM (BERT uncased) tokenizer's
PATHS = ("glm", "plain")
WARMUP_TOKENS = 16
MMAP_THRESHOLD = 128 * 1024  # glibc's default initial value, here fixed (see run_memory_cell)


def t5_config() -> T5Config:
    return T5Config(vocab_size=VOCAB, dropout_rate=0.0, feed_forward_proj="relu", **CONFIGS[MODEL])


def build(path: str, config: T5Config) -> torch.nn.Module:
    """The GLM (eager, global) or the plain HF T5 (eager), randomly initialised, in eval mode."""
    config = copy.deepcopy(config)  # _from_config keeps the object, and T5GLMEncoder sets its attention
    if path == "glm":
        return T5GLMEncoder.from_config(config, attention="global", backend="eager").eval()
    return T5EncoderModel._from_config(config, attn_implementation="eager").eval()


def forward(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Shapes: **inputs** as ``GLMCollate`` gives them -> (B, L, d_model); the plain T5 reads the ids only."""
    with torch.no_grad():
        if isinstance(model, T5GLMEncoder):
            return model(**inputs)
        return model(input_ids=inputs["input_ids"], attention_mask=inputs["token_mask"]).last_hidden_state


def model_inputs(graph: Graph, length: int | None = None) -> dict[str, torch.Tensor]:
    """The first ``length`` tokens of ``graph`` (all by default) as a batch of one."""
    n = length or graph.tokens
    return {
        "input_ids": graph.input_ids[:, :n],
        "token_mask": torch.ones(1, n, dtype=torch.bool),
        "relative_position": graph.relative_position[:, :n, :n],
        "kind": graph.kind[:, :n, :n],
    }


def proc_status_mib(field: str) -> float:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(match.group(1)) / 1024


def memory_cell(path: str, graph_file: str, threads: int) -> dict:
    """Peak extra resident memory of one forward of ``path`` on the saved graph (run in a fresh process)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    graph = Graph(**torch.load(graph_file))
    model = build(path, t5_config())
    forward(model, model_inputs(graph, WARMUP_TOKENS))
    inputs = model_inputs(graph)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        method = "VmHWM after reset - VmRSS before"
    except OSError:
        method = "ru_maxrss delta (high-water mark could not be reset; may under-report)"
    before_rss = proc_status_mib("VmRSS")
    before_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    forward(model, inputs)
    if method.startswith("VmHWM"):
        extra = proc_status_mib("VmHWM") - before_rss
    else:
        extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before_max
    return {"rss_before_mib": round(before_rss), "peak_extra_mib": round(extra), "method": method}


def run_memory_cell(path: str, graph_file: str, threads: int) -> dict:
    command = [sys.executable, __file__, "--memory-cell", path, "--graph", graph_file, "--threads", str(threads)]
    # A fixed glibc mmap threshold: every large tensor gets its own mapping, returned to the kernel when
    # freed, so the high-water mark counts tensors alive at the same time rather than heap fragmentation.
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        return {"error": done.stderr[-1000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def latencies(models: dict[str, torch.nn.Module], graph: Graph, repeats: int) -> dict[str, list[float]]:
    """Milliseconds of ``repeats`` forwards per model after one warm-up each, alternating which goes first."""
    inputs = model_inputs(graph)
    for model in models.values():
        forward(model, inputs)
    times: dict[str, list[float]] = {path: [] for path in models}
    for i in range(repeats):
        for path in list(models)[:: 1 if i % 2 == 0 else -1]:
            start = time.perf_counter()
            forward(models[path], inputs)
            times[path].append(1000 * (time.perf_counter() - start))
    return times


def positions_ms(layout, mode: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        graph_positions(layout, mode)
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def markdown(result: dict) -> str:
    header = (
        "| triplets | tokens | GLM ms | plain ms | GLM/plain | GLM peak MiB | plain peak MiB | GLM/plain "
        "| graph_positions triple ms | path ms |"
    )
    lines = [header, "|" + "---:|" * 10]
    for cell in result["cells"]:
        ms, memory, collate = cell["ms_median"], cell["peak_extra_mib"], cell["graph_positions_ms"]
        mem_ratio = memory["glm"] / memory["plain"] if memory["glm"] and memory["plain"] else float("nan")
        values = [cell["triplets"], f"{cell['tokens']:,}", f"{ms['glm']:.0f}", f"{ms['plain']:.0f}"]
        values += [f"{cell['latency_ratio']:.2f}", memory["glm"], memory["plain"], f"{mem_ratio:.2f}"]
        values += [f"{collate['triple']:.0f}", f"{collate['path']:.0f}"]
        lines.append("| " + " | ".join(str(v) for v in values) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triplets", type=int, nargs="+", default=[150, 300, 600], help="subgraph budgets")
    parser.add_argument("--repeats", type=int, default=5, help="timed forwards per model after one warm-up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/bench_glm_cpu.json")
    parser.add_argument("--memory-cell", choices=PATHS, help=argparse.SUPPRESS)  # internal: one subprocess cell
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_cell:
        print(json.dumps(memory_cell(args.memory_cell, args.graph, args.threads)))
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    start = time.perf_counter()

    config = t5_config()
    glm = build("glm", config)
    plain = build("plain", config)
    plain.load_state_dict(glm.t5.state_dict())
    models = {"glm": glm, "plain": plain}
    result = {
        "model": {"size": MODEL, **CONFIGS[MODEL], "vocab_size": VOCAB, "glm": "eager, global", "plain": "HF eager"},
        "parameters": sum(p.numel() for p in glm.parameters()),
        "graphs": f"real Levi graphs with a question: random_kg{KG_SIZE}, select_subgraph 2 hops, 'triple' positions",
        "batch": 1,
        "dtype": "float32",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_1min_start": round(os.getloadavg()[0], 2),
        "latency": f"median of {args.repeats} no-grad forwards after 1 warm-up, GLM and plain alternating",
        "memory": "peak RSS growth during one forward, fresh subprocess per cell (see the module docstring)",
        "cells": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for triplets, layout in levi_layouts(args.triplets):
            graph = Graph.from_layout(layout, triplets, "triple")
            graph_file = str(Path(tmp) / f"graph_{triplets}.pt")
            torch.save(vars(graph), graph_file)
            times = latencies(models, graph, args.repeats)
            median = {path: statistics.median(t) for path, t in times.items()}
            memory = {path: run_memory_cell(path, graph_file, args.threads) for path in PATHS}
            cell = {
                "triplets": triplets,
                "tokens": graph.tokens,
                "question_tokens": graph.question_tokens,
                "ms_median": {path: round(ms, 1) for path, ms in median.items()},
                "ms_all": {path: [round(ms, 1) for ms in t] for path, t in times.items()},
                "latency_ratio": round(median["glm"] / median["plain"], 3),
                "peak_extra_mib": {path: memory[path].get("peak_extra_mib") for path in PATHS},
                "memory_cells": memory,
                # One (H, L, L) float32 tensor: the unit of attention memory per layer.
                "scores_tensor_mib": round(CONFIGS[MODEL]["num_heads"] * graph.tokens**2 * 4 / 2**20),
                "graph_positions_ms": {mode: round(positions_ms(layout, mode), 1) for mode in ("triple", "path")},
                "load_average_1min": round(os.getloadavg()[0], 2),  # other processes on these cores
            }
            result["cells"].append(cell)
            print(json.dumps(cell), flush=True)
    result["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    result["total_s"] = round(time.perf_counter() - start, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{MODEL}-sized T5, float32, batch 1, {args.threads} threads, {result['total_s']} s (written to {out})\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
