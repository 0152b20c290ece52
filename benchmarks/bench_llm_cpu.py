"""SmolLM2-135M-Instruct (the offline default of glmrag.llm) on the CPU: load times and generation throughput.

- **Load**: ``LocalLLM("offline:smollm2-135m-instruct").load_seconds``, each in a fresh Python process;
  the lazy imports of transformers are measured apart (``imports_s``): ``first`` with an empty cache
  (read the GGUF file, dequantise, convert its tokenizer, save the float32 checkpoint), ``cached`` with
  that checkpoint on disk, and ``warm_load_s``: a second load in the same process.
- **Throughput**: a batch of 4 short chat prompts, greedy, ``--max-new-tokens`` new tokens at most,
  generated as one left-padded batch (``batch_size=4``) and one by one (``batch_size=1``), with 1 and 2
  torch threads, and 2 threads with ``OMP_WAIT_POLICY=PASSIVE``; generated tokens (as counted by the
  backend's usage counter) over wall seconds, median of ``--repeats`` runs after one warm-up. Each
  setting runs in its own process.

The machine's load average is recorded with each figure: the two cores are shared with other work, and
two torch threads that spin-wait (OpenMP's default) on a busy pair of cores can be ten times slower
than one.

Run (about 3 to 6 minutes on 2 cores): ``python benchmarks/bench_llm_cpu.py``. Writes ``--out`` (JSON)
and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "offline:smollm2-135m-instruct"
# (torch threads, OMP_WAIT_POLICY): OpenMP threads spin while they wait by default, which on cores that
# other processes also use costs far more than it saves; PASSIVE makes them sleep.
GENERATE_CELLS = [(1, None), (2, None), (2, "PASSIVE")]
PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Name three rivers in Europe."}],
    [{"role": "user", "content": "Who wrote Hamlet? Answer briefly."}],
    [{"role": "user", "content": "Explain photosynthesis in one sentence."}],
]


def cell_load(cache_dir: str) -> dict:
    start = time.perf_counter()
    import torch  # noqa: F401
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: F401  (lazy modules, counted here)

    from glmrag.llm.local import LocalLLM

    imports = time.perf_counter() - start
    first = LocalLLM(MODEL, cache_dir=cache_dir)
    again = LocalLLM(MODEL, cache_dir=cache_dir)
    return {
        "imports_s": imports,
        "load_s": first.load_seconds,
        "built": first.built_checkpoint,
        "warm_load_s": again.load_seconds,
        "loadavg": os.getloadavg()[0],
    }


def cell_generate(cache_dir: str, threads: int, max_new_tokens: int, repeats: int) -> dict:
    import torch

    from glmrag.llm.local import LocalLLM

    torch.set_num_threads(threads)
    out = {"threads": threads, "loadavg_before": os.getloadavg()[0]}
    for batch_size in (4, 1):
        llm = LocalLLM(MODEL, cache_dir=cache_dir, batch_size=batch_size)
        llm.generate(PROMPTS[:1], max_new_tokens=4)  # warm-up
        rates, tokens = [], []
        for _ in range(repeats):
            llm.usage.reset()
            start = time.perf_counter()
            gens = llm.generate(PROMPTS, max_new_tokens=max_new_tokens)
            wall = time.perf_counter() - start
            tokens.append(llm.usage.total().generated_tokens)
            rates.append(tokens[-1] / wall)
        out[f"batch{batch_size}"] = {
            "tokens_per_s": statistics.median(rates),
            "runs_tokens_per_s": rates,
            "generated_tokens": tokens[-1],
            "texts": [g.text for g in gens],
        }
    out["loadavg_after"] = os.getloadavg()[0]
    return out


def run_cell(*args: str, env: dict[str, str] | None = None) -> dict:
    env = os.environ | (env or {})
    res = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"cell {args} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_llm_cpu.json"))
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cell", choices=["load", "generate"], help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell == "load":
        print(json.dumps(cell_load(args.cache_dir)))
        return
    if args.cell == "generate":
        print(json.dumps(cell_generate(args.cache_dir, args.threads, args.max_new_tokens, args.repeats)))
        return

    import transformers

    cache = tempfile.mkdtemp(prefix="bench_llm_")
    try:
        first = run_cell("--cell", "load", "--cache-dir", cache)
        cached = run_cell("--cell", "load", "--cache-dir", cache)
        settings = ["--max-new-tokens", str(args.max_new_tokens), "--repeats", str(args.repeats)]
        gen = []
        for threads, wait_policy in GENERATE_CELLS:
            env = {"OMP_WAIT_POLICY": wait_policy} if wait_policy else None
            cell = run_cell("--cell", "generate", "--cache-dir", cache, "--threads", str(threads), *settings, env=env)
            gen.append(cell | {"omp_wait_policy": wait_policy or "default"})
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    result = {
        "model": MODEL,
        "machine": {"cpus": os.cpu_count()},
        "transformers": transformers.__version__,
        "command": "python benchmarks/bench_llm_cpu.py",
        "load": {"first": first, "cached": cached},
        "generate": {"prompts": len(PROMPTS), "max_new_tokens": args.max_new_tokens, "by_threads": gen},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print("| what | seconds |\n| --- | --- |")
    print(f"| first load (GGUF -> dequantised checkpoint) | {first['load_s']:.2f} |")
    print(f"| cached load, fresh process | {cached['load_s']:.2f} |")
    print(f"| imports (torch, transformers, Llama and tokenizer modules) | {cached['imports_s']:.2f} |")
    print(f"| cached load, warm process | {cached['warm_load_s']:.2f} |")
    print("\n| threads | OMP_WAIT_POLICY | batch 4 tok/s | one by one tok/s | load avg |")
    print("| --- | --- | --- | --- | --- |")
    for g in gen:
        print(
            f"| {g['threads']} | {g['omp_wait_policy']} | {g['batch4']['tokens_per_s']:.1f} "
            f"| {g['batch1']['tokens_per_s']:.1f} | {g['loadavg_before']:.1f} |"
        )


if __name__ == "__main__":
    main()
