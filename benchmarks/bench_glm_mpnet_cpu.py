"""The MPNet-GLM against plain MPNet on the CPU: forward and training step at experiment=glm_2wiki_cpu's budget.

The model: a randomly initialised MPNet of all-mpnet-base-v2's size (hidden 768, 12 layers, 12 heads,
intermediate 3072; speed does not depend on the weights, so the benchmark needs no download) over the MiniLM
vocabulary, read either through ``glmrag.nn.glm_mpnet.MPNetGLMEncoder`` (eager backend, global GLM, sentence
absolute positions, graph-aware buckets built per forward as in production) or as the plain Hugging Face
``MPNetModel`` (its eager attention, text positions) with the same weights and the same token ids. Inputs: a
batch of real Levi graphs with a question (``gpu_glm.levi_layouts``: ``--triplets`` triplets around three seeds
of a synthetic KG; its 80 triplets give 420 tokens, about the recipe's real 2Wiki subgraphs at 100 triplets,
407 tokens on average), float32, ``--threads`` torch threads.

- **forward**: no grad, eval mode (evaluation's cost per batch).
- **train step**: forward, ``sum()`` loss, backward, with the embeddings and the lowest ``--frozen`` layers
  frozen in both (the recipe's 8; plain MPNet stops backpropagation there too, since nothing below needs a
  gradient), and with nothing frozen. Dropout off in both, so both do the same arithmetic.

Median of ``--repeats`` after one warm-up; GLM and plain alternate in one process, so load from other
processes hits both alike; the ratio is GLM / plain. Run: ``python benchmarks/bench_glm_mpnet_cpu.py``
(about 3 minutes on 2 cores). Writes ``--out`` (JSON) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from gpu_glm import levi_layouts  # same folder: run as python benchmarks/bench_glm_mpnet_cpu.py
from transformers import MPNetConfig, MPNetModel

from glmrag.graph.levi import with_positions
from glmrag.nn.glm_mpnet import MPNetGLMEncoder

BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
"""all-mpnet-base-v2's encoder size (its config.json)."""
VOCAB = 30522  # the MiniLM (BERT uncased) tokenizer's


def batch_of(triplets: int, batch: int) -> dict[str, torch.Tensor]:
    """``batch`` copies of one real Levi graph (positions in mode "triple"). Shapes: (B, L) and (B, L, L)."""
    ((_, layout),) = levi_layouts([triplets])
    graph = with_positions(layout, "triple")
    ids = torch.from_numpy(graph.input_ids)[None].expand(batch, -1).contiguous()  # (B, L)
    return {
        "input_ids": ids,
        "token_mask": torch.ones_like(ids, dtype=torch.bool),
        "relative_position": torch.from_numpy(graph.relative_position)[None].expand(batch, -1, -1).contiguous(),
        "kind": torch.from_numpy(graph.kind)[None].expand(batch, -1, -1).contiguous(),
    }


def alternating_medians(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median seconds of each step over ``repeats`` rounds (one warm-up each), the steps alternating in each round."""
    for step in steps.values():
        step()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def freeze(model: MPNetModel, layers: int) -> None:
    for module in [model.embeddings, *model.encoder.layer[:layers]] if layers else []:
        module.requires_grad_(False)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triplets", type=int, default=80)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--frozen", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=BASE["num_hidden_layers"], help="fewer for a dry run")
    parser.add_argument("--out", default="benchmarks/results/bench_glm_mpnet_cpu.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = MPNetConfig(
        vocab_size=VOCAB,
        **{**BASE, "num_hidden_layers": args.layers},
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config._attn_implementation = "eager"
    inputs = batch_of(args.triplets, args.batch)
    if inputs["input_ids"].shape[1] > config.max_position_embeddings - 2:
        parser.error(f"{inputs['input_ids'].shape[1]} tokens: plain MPNet reads at most 512; use fewer --triplets")
    plain = MPNetModel(config, add_pooling_layer=False)

    def forward(model: torch.nn.Module, glm: bool) -> Callable[[], None]:
        def step() -> None:
            with torch.no_grad():
                model(**inputs) if glm else model(input_ids=inputs["input_ids"])

        return step

    def train_step(model: torch.nn.Module, glm: bool) -> Callable[[], None]:
        def step() -> None:
            out = model(**inputs) if glm else model(input_ids=inputs["input_ids"]).last_hidden_state
            out.sum().backward()
            model.zero_grad(set_to_none=True)

        return step

    rows = []
    for name, frozen, make, training in (
        ("forward", 0, forward, False),
        (f"train step, {args.frozen} layers frozen", args.frozen, train_step, True),
        ("train step, nothing frozen", 0, train_step, True),
    ):
        reference = copy.deepcopy(plain).train(training)
        freeze(reference, frozen)
        glm = MPNetGLMEncoder(copy.deepcopy(plain)).train(training)
        glm.freeze_bottom(frozen)
        seconds = alternating_medians({"glm": make(glm, True), "plain": make(reference, False)}, args.repeats)
        rows.append({"step": name, **seconds, "ratio": seconds["glm"] / seconds["plain"]})

    report = {
        "tokens": int(inputs["input_ids"].shape[1]),
        "batch": args.batch,
        "triplets": args.triplets,
        "threads": args.threads,
        "layers": args.layers,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"MPNet-base size, batch {args.batch} x {report['tokens']} tokens ({args.triplets} triplets), "
        f"{args.threads} threads"
    )
    print("| step | GLM (s) | plain MPNet (s) | GLM / plain |\n|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['step']} | {row['glm']:.3f} | {row['plain']:.3f} | {row['ratio']:.2f} |")
    return report


if __name__ == "__main__":
    main()
