"""GLM encoder latency and peak memory on one GPU: plain T5, graph bias through flex, graph bias through eager.

The GLM retriever of GLM-RAG is a T5 encoder whose attention bias comes from a
(K, H) table indexed by per-pair graph-aware buckets. A subgraph has about 5.5
tokens per triplet, so 300/600/1,200 triplets are about 1,650/3,300/6,600
tokens (GLM-RAG Table 7: T5-large, about 3,300 tokens for 600 triplets). For
t5-base and t5-large (random weights, sizes hard-coded, no hub access) and each
length L this measures, in bf16 on the GPU, batch 1:

- ``plain``: the Hugging Face ``T5EncoderModel`` eager forward (T5's own text
  relative bias), the baseline cost of a T5 encoder at that length;
- ``flex-global`` / ``flex-local``: the same weights, the graph bias through
  ``glmrag.nn.flex_attention.flex_graph_attention`` (global GLM: all pairs;
  local GLM: only pairs of triplets that share an entity);
- ``eager-global`` / ``eager-local``: the same through ``eager_graph_attention``.

Each cell: ``forward`` (no grad), ``train`` (forward + backward of the sum of
the outputs) and ``train_ckpt`` (the same with activation checkpointing per
T5 block): median milliseconds of ``--repeats`` runs after ``--warmup`` runs
(``torch.cuda.synchronize`` around each), and ``torch.cuda.max_memory_allocated``
after a reset (weights included; ``extra_gib`` is the part above what was
allocated before the cell). A CUDA out-of-memory error makes the cell "OOM".
Attention dropout is 0 everywhere (flex has none). The first flex cells
include ``torch.compile`` time in their warm-up only.

The synthetic graph: triplets of 4 to 7 tokens (mean 5.5), in runs of 1 to
``--group-max`` triplets that share a head entity (a BFS-like linearisation
keeps them adjacent). Bucket of a pair in the same triplet: T5's relative
position bucket (0..31); any other pair: 32 (K = 33). The local GLM allows
pairs inside one run. The JSON records the share of 128 x 128 blocks flex skips.

    python benchmarks/gpu_glm.py --backend-check                     # on the H200
    python benchmarks/gpu_glm.py --smoke --out /tmp/gpu_glm_smoke.json   # CPU, tiny, < 1 min

Writes ``--out`` (JSON, rewritten after every cell) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from torch.nn.attention.flex_attention import BlockMask
from transformers import AttentionInterface, T5Config, T5EncoderModel
from transformers.models.t5.modeling_t5 import T5Attention, eager_attention_forward

from glmrag.nn.flex_attention import cpu_flex_backward, eager_graph_attention, flex_graph_attention, graph_block_mask

try:
    from glmrag.nn.glm import GraphAttentionBias
except ImportError:  # glmrag/nn/glm.py not written yet: the same contract

    @dataclass(eq=False)
    class GraphAttentionBias:
        bucket: torch.Tensor  # (B, L, L) int
        table: torch.Tensor  # (K, H)
        allowed: torch.Tensor | None  # (B, L, L) bool
        key_mask: torch.Tensor  # (B, L) bool
        backend: str = "eager"


CONFIGS = {  # T5 (v1) encoder sizes
    "t5-base": {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12, "d_kv": 64},
    "t5-large": {"d_model": 1024, "d_ff": 4096, "num_layers": 24, "num_heads": 16, "d_kv": 64},
    "tiny": {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4, "d_kv": 16},
}
TOKENS_PER_TRIPLET = 5.5
TEXT_BUCKETS = 32  # T5's relative position buckets, used inside a triplet
NUM_BUCKETS = TEXT_BUCKETS + 1  # + one bucket for pairs in different triplets
PATHS = ["plain", "flex-global", "flex-local", "eager-global", "eager-local"]
MODES = ["forward", "train", "train_ckpt"]
ATTENTION_NAME = "glm_graph"


def graph_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    position_bias: torch.Tensor | GraphAttentionBias | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """T5 attention function: graph bias to flex or eager by ``bias.backend``, anything else to T5's eager.

    Shapes:
        query, key, value: (B, H, L, D)
        output: (B, L, H, D), and no attention weights
    """
    if not hasattr(position_bias, "bucket"):
        return eager_attention_forward(
            module, query, key, value, attention_mask, scaling, dropout, position_bias=position_bias, **kwargs
        )
    if attention_mask is not None:
        raise ValueError("graph attention takes its padding from GraphAttentionBias.key_mask; pass attention_mask=None")
    scaling = 1.0 if scaling is None else scaling
    if position_bias.backend == "flex":
        return flex_graph_attention(query, key, value, position_bias, scaling, dropout), None
    return eager_graph_attention(query, key, value, position_bias, scaling, dropout, module.training), None


def build_model(name: str, device: torch.device, dtype: torch.dtype) -> T5EncoderModel:
    """A randomly initialised T5 encoder of a hard-coded size, attention routed through ``graph_attention``."""
    config = T5Config(vocab_size=32128, dropout_rate=0.0, feed_forward_proj="relu", **CONFIGS[name])
    with torch.device(device):
        model = T5EncoderModel._from_config(config, attn_implementation=ATTENTION_NAME, dtype=dtype)
    return model.to(device=device, dtype=dtype)


def graph_encode(model: T5EncoderModel, input_ids: torch.Tensor, bias: GraphAttentionBias) -> torch.Tensor:
    """The T5 encoder stack with the graph bias in every block (the loop T5Stack runs, without its own bias).

    Shapes:
        input_ids: (B, L)
        output: (B, L, d_model)
    """
    encoder = model.encoder
    hidden = encoder.embed_tokens(input_ids)  # (B, L, d_model)
    for block in encoder.block:
        # Positional arguments: activation checkpointing replays them.
        hidden = block(hidden, None, bias)[0]
    return encoder.final_layer_norm(hidden)


@dataclass
class Graph:
    """A synthetic linearised subgraph of ``num_tokens`` tokens."""

    bucket: torch.Tensor  # (1, L, L) int32 in [0, NUM_BUCKETS)
    allowed: torch.Tensor  # (1, L, L) bool: same run of triplets sharing an entity
    triplets: int


def make_graph(num_tokens: int, group_max: int, device: torch.device, seed: int = 0) -> Graph:
    """Triplets of 4-7 tokens in runs of 1..group_max sharing an entity; see the module docstring."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 8, (num_tokens,), generator=g)
    lengths = lengths[: int((lengths.cumsum(0) < num_tokens).sum()) + 1]
    triplet = torch.repeat_interleave(torch.arange(len(lengths)), lengths)[:num_tokens]  # (L,)
    sizes = torch.randint(1, group_max + 1, (len(lengths),), generator=g)
    group = torch.repeat_interleave(torch.arange(len(sizes)), sizes)[: len(lengths)][triplet]  # (L,)
    triplet, group = triplet.to(device), group.to(device)
    position = torch.arange(num_tokens, device=device)
    relative = position[None, :] - position[:, None]  # (L, L)
    text_bucket = T5Attention._relative_position_bucket(relative, bidirectional=True, num_buckets=TEXT_BUCKETS)
    same_triplet = triplet[:, None] == triplet[None, :]  # (L, L)
    bucket = torch.where(same_triplet, text_bucket, TEXT_BUCKETS).to(torch.int32)
    allowed = group[:, None] == group[None, :]  # (L, L)
    return Graph(bucket=bucket[None], allowed=allowed[None], triplets=int(triplet.max()) + 1)


def skipped_blocks(block_mask: BlockMask) -> float:
    """Percent of (query block, key block) pairs the kernel skips (``BlockMask.sparsity`` counts padding as work)."""
    used = block_mask.kv_num_blocks.sum()
    if block_mask.full_kv_num_blocks is not None:
        used = used + block_mask.full_kv_num_blocks.sum()
    q_blocks, kv_blocks = block_mask.kv_indices.shape[-2:]
    return round(100 * (1 - used.item() / (block_mask.kv_num_blocks.shape[0] * q_blocks * kv_blocks)), 2)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def cleanup(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure(step: Callable[[], None], device: torch.device, warmup: int, repeats: int) -> dict:
    """Median milliseconds of ``repeats`` steps after ``warmup``; peak memory over all of them."""
    cleanup(device)
    base = 0
    if device.type == "cuda":
        synchronize(device)
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(warmup + repeats):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        if i >= warmup:
            times.append(1000 * (time.perf_counter() - start))
    result = {"status": "ok", "ms_median": round(statistics.median(times), 2), "ms_all": [round(t, 2) for t in times]}
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated()
        result |= {"peak_gib": round(peak / 2**30, 3), "extra_gib": round((peak - base) / 2**30, 3)}
    return result


def run_cell(step: Callable[[], None], device: torch.device, warmup: int, repeats: int) -> dict:
    """``measure``, with an out-of-memory error (or any other) recorded instead of raised."""
    try:
        result = measure(step, device, warmup, repeats)
    except torch.OutOfMemoryError:
        result = {"status": "OOM"}
    except Exception as err:  # a failed compile must not cost the other cells
        text = f"{type(err).__name__}: {err}"
        result = {"status": "OOM" if "out of memory" in text.lower() else f"error: {text[:400]}"}
    cleanup(device)
    return result


def set_checkpointing(model: T5EncoderModel, enabled: bool) -> None:
    if enabled:
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    else:
        disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
        disable()


def make_step(
    model: T5EncoderModel, path: str, mode: str, input_ids: torch.Tensor, bias: GraphAttentionBias | None
) -> Callable[[], None]:
    """One forward (no grad) or one forward + backward of the sum of the outputs."""

    def encode() -> torch.Tensor:
        if path == "plain":
            return model(input_ids=input_ids).last_hidden_state
        return graph_encode(model, input_ids, bias)

    def step() -> None:
        if mode == "forward":
            with torch.no_grad():
                encode()
            return
        model.zero_grad(set_to_none=True)
        if bias is not None:
            bias.table.grad = None
        encode().float().sum().backward()

    return step


def backend_check(device: torch.device, dtype: torch.dtype, heads: int) -> dict:
    """Flex against eager on the device: one attention call (float32 with gradients, and ``dtype``), a tiny encoder."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    batch, length, dim = 2, 300, 64
    key_mask = (torch.arange(length)[None] < torch.tensor([[length], [257]])).to(device)  # (2, L)
    allowed = (torch.rand(batch, length, length, generator=g) < 0.2).to(device)
    allowed = (allowed | torch.eye(length, dtype=torch.bool, device=device)) & key_mask[:, :, None]
    bucket = torch.randint(0, NUM_BUCKETS, (batch, length, length), generator=g).to(device)
    tensors = [torch.randn(batch, heads, length, dim, generator=g).to(device) for _ in range(3)]
    table = torch.randn(NUM_BUCKETS, heads, generator=g).to(device)
    rows = (key_mask[:, None, :] & allowed).any(-1)[:, :, None, None]  # (2, L, 1, 1): rows with a key
    report = {}
    for precision in (torch.float32, dtype):
        outputs = {}
        for name, attention in (("flex", flex_graph_attention), ("eager", eager_graph_attention)):
            leaves = [x.detach().clone().to(precision).requires_grad_() for x in (*tensors, table)]
            bias = GraphAttentionBias(bucket=bucket, table=leaves[3], allowed=allowed, key_mask=key_mask)
            out = attention(*leaves[:3], bias, 1.0) * rows
            out.float().square().sum().backward()
            outputs[name] = [out.detach().float().clone()] + [x.grad.float().clone() for x in leaves]
        for what, f, e in zip(("out", "dq", "dk", "dv", "dtable"), outputs["flex"], outputs["eager"], strict=True):
            report[f"{str(precision).removeprefix('torch.')}_{what}_max_rel_err"] = float(
                (f - e).abs().max() / e.abs().max().clamp_min(1e-12)
            )
    torch.backends.cuda.matmul.allow_tf32 = tf32

    model = build_model("tiny", device, dtype)
    ids = torch.randint(0, 32128, (1, 200), generator=g).to(device)
    graph = make_graph(200, group_max=4, device=device)
    table = torch.randn(NUM_BUCKETS, CONFIGS["tiny"]["num_heads"], generator=g).to(device, dtype)
    key_mask = torch.ones(1, 200, dtype=torch.bool, device=device)
    with torch.no_grad():
        encoded = {
            backend: graph_encode(model, ids, GraphAttentionBias(graph.bucket, table, graph.allowed, key_mask, backend))
            for backend in ("flex", "eager")
        }
    report["encoder_max_rel_err"] = float(
        (encoded["flex"] - encoded["eager"]).abs().max() / encoded["eager"].abs().max()
    )
    # Pass: every float32 error < 1e-3; in low precision the output and the encoder < 3e-2 (low-precision
    # gradients are reported, not judged: bf16 accumulation order differs between the kernels).
    low = str(dtype).removeprefix("torch.")
    judged = {k: v for k, v in report.items() if k.startswith("float32")}
    judged |= {k: v for k, v in report.items() if k in (f"{low}_out_max_rel_err", "encoder_max_rel_err")}
    report["ok"] = all(v < (1e-3 if k.startswith("float32") else 3e-2) for k, v in judged.items())
    return report


def markdown(cells: list[dict], modes: list[str]) -> str:
    """One row per (model, tokens, path); milliseconds and peak GiB per mode."""
    rows: dict[tuple, dict] = {}
    for cell in cells:
        rows.setdefault((cell["model"], cell["tokens"], cell["triplets"], cell["path"]), {})[cell["mode"]] = cell
    header = "| model | tokens | triplets | path | " + " | ".join(f"{m} ms | {m} GiB" for m in modes) + " |"
    lines = [header, "|" + "---|" * 4 + "---:|" * (2 * len(modes))]
    for (model, tokens, triplets, path), by_mode in rows.items():
        values = []
        for mode in modes:
            cell = by_mode.get(mode, {"status": "-"})
            if cell["status"] == "ok":
                values += [f"{cell['ms_median']:.1f}", "-" if "peak_gib" not in cell else f"{cell['peak_gib']:.2f}"]
            else:
                values += ["OOM" if cell["status"] == "OOM" else "error", ""]
        lines.append(f"| {model} | {tokens:,} | {triplets:,} | {path} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["t5-base", "t5-large"], choices=sorted(CONFIGS))
    parser.add_argument("--tokens", type=int, nargs="+", default=[1650, 3300, 6600], help="sequence lengths L")
    parser.add_argument("--paths", nargs="+", default=PATHS, choices=PATHS)
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--group-max", type=int, default=8, help="most triplets sharing one entity (local GLM)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--backend-check", action="store_true", help="compare flex and eager on the device first")
    parser.add_argument("--smoke", action="store_true", help="tiny model, two short lengths, few runs (CPU proof)")
    parser.add_argument("--out", default="benchmarks/results/gpu_glm.json")
    args = parser.parse_args()
    if args.smoke:
        args.models, args.tokens, args.repeats, args.warmup = ["tiny"], [64, 160], 2, 1
        torch.set_num_threads(1)  # tiny matmuls on a shared CPU: thread hand-offs cost more than the maths
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" and device.type == "cuda" else torch.float32
    AttentionInterface.register(ATTENTION_NAME, graph_attention)
    # Grad modes x lengths x head counts x checkpoint replays exceed dynamo's default 8 graphs per function;
    # past the limit flex would silently run unfused, so allow more.
    torch._dynamo.config.recompile_limit = 64
    torch.manual_seed(0)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # FlexAttention's CPU backward is only the unfused reference, which torch guards; CPU runs are smoke tests.
    guard = cpu_flex_backward() if device.type == "cpu" else contextlib.nullcontext()

    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "batch": 1,
        "tokens_per_triplet": TOKENS_PER_TRIPLET,
        "num_buckets": NUM_BUCKETS,
        "args": vars(args),
        "graphs": {},
        "cells": [],
    }

    def save() -> None:
        out.write_text(json.dumps(result, indent=2) + "\n")

    with guard:
        if args.backend_check:
            try:
                result["backend_check"] = backend_check(device, dtype, heads=CONFIGS[args.models[0]]["num_heads"])
            except Exception as err:  # a failed compile is a result too
                result["backend_check"] = {"ok": False, "error": f"{type(err).__name__}: {str(err)[:1000]}"}
            print("backend check:", json.dumps(result["backend_check"]))
            if not result["backend_check"]["ok"]:
                print("BACKEND CHECK FAILED: flex and eager disagree on this device")
            save()
        for name in args.models:
            model = build_model(name, device, dtype)
            heads = CONFIGS[name]["num_heads"]
            for tokens in args.tokens:
                graph = make_graph(tokens, args.group_max, device)
                ids = torch.randint(0, 32128, (1, tokens), device=device)
                key_mask = torch.ones(1, tokens, dtype=torch.bool, device=device)
                table = torch.nn.Parameter(0.1 * torch.randn(NUM_BUCKETS, heads, device=device, dtype=dtype))
                result["graphs"][str(tokens)] = {
                    "triplets": graph.triplets,
                    "allowed_fraction_local": round(graph.allowed.float().mean().item(), 5),
                    "skipped_blocks_local_pct": skipped_blocks(
                        graph_block_mask(GraphAttentionBias(graph.bucket, table, graph.allowed, key_mask), tokens)
                    ),
                }
                for path in args.paths:
                    bias = None
                    if path != "plain":
                        backend, variant = path.split("-")
                        allowed = graph.allowed if variant == "local" else None
                        bias = GraphAttentionBias(graph.bucket, table, allowed, key_mask, backend)
                    for mode in args.modes:
                        model.train(mode != "forward")
                        set_checkpointing(model, mode == "train_ckpt")
                        step = make_step(model, path, mode, ids, bias)
                        cell = {"model": name, "tokens": tokens, "triplets": graph.triplets, "path": path, "mode": mode}
                        cell |= run_cell(step, device, args.warmup, args.repeats)
                        result["cells"].append(cell)
                        print(json.dumps(cell))
                        save()
                    del bias
                del graph, ids, table
                cleanup(device)
            del model
            cleanup(device)
    save()
    print(f"\n{result['device']}, torch {result['torch']}, {result['dtype']}, batch 1 (written to {out})\n")
    print(markdown(result["cells"], args.modes))


if __name__ == "__main__":
    main()
