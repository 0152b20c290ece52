"""GLM encoder latency and peak memory on one GPU: plain T5 against ``glmrag.nn.glm.T5GLMEncoder``.

The GLM retriever of GLM-RAG is a T5 encoder whose attention bias comes from a
(K, H) table indexed by per-pair graph-aware buckets. A subgraph has about 5.5
tokens per triplet, so 300/600/1,200 triplets are about 1,650/3,300/6,600
tokens (GLM-RAG Table 7: T5-large, about 3,300 tokens for 600 triplets). For
t5-base and t5-large (random weights, sizes hard-coded, no hub access) and each
length L this measures, in bf16 on the GPU, batch 1, the production code:

- ``plain`` / ``plain-sdpa``: a Hugging Face ``T5EncoderModel`` with
  ``attn_implementation`` ``eager`` / ``sdpa`` (T5's own text relative bias),
  the baseline cost of a T5 encoder at that length. It shares the weight
  storage of the GLM's encoder (no second copy on the device);
- ``flex-global`` / ``flex-local`` / ``eager-global`` / ``eager-local``:
  ``T5GLMEncoder(t5, attention, backend)`` wrapping that encoder, fed the int32
  relative positions and int8 pair kinds a ``GLMCollate`` batch carries
  (bucket ids, the dense bias or the flex ``score_mod`` are computed inside
  the forward, as in training).

Each cell: ``forward`` (no grad), ``train`` (forward + backward of the sum of
the outputs), ``train_ckpt`` (the same with activation checkpointing per
T5 block), ``step`` and ``step_ckpt`` (``train`` / ``train_ckpt`` and then an
AdamW step, lr 1e-4, no weight decay, as ``configs/model/glm.yaml``): median
milliseconds of ``--repeats`` runs after ``--warmup`` runs
(``torch.cuda.synchronize`` around each), and ``torch.cuda.max_memory_allocated``
after a reset (weights and inputs included, and the AdamW state of the ``step``
modes; ``extra_gib`` is the part above what was allocated before the cell). A
CUDA out-of-memory error makes the cell "OOM"; any other error (the model
build included, or FlexAttention falling back to its unfused path, which
:mod:`glmrag.nn.flex_attention` raises) is recorded in the cell and in
``errors``, and the run goes on. Attention dropout is 0 everywhere (flex has
none). The first flex cells include ``torch.compile`` time in their warm-up only.

MPNet (``--models mpnet-base mpnet-large``, glmrag's offline GLM backbone, :mod:`glmrag.nn.glm_mpnet`): the
GLM paths wrap a random ``MPNetModel`` in ``MPNetGLMEncoder`` (sentence absolute positions); ``plain`` is
``MPNetModel`` with a position table of 8,194 rows so that it reads 6,600 tokens (MPNet has no SDPA path and
no Hugging Face checkpointing: ``plain-sdpa`` is refused, ``plain`` x ``*_ckpt`` cells are "n/a").
``mpnet-large`` has T5-large's width, depth and heads (1024, 24, 16); ``mpnet-tiny`` is for dry runs.

Precision (``--dtype``): ``bf16`` (weights and states in bf16), ``fp32``, or
``bf16-mixed``, what ``trainer=gpu`` (``configs/trainer/gpu.yaml``) runs:
float32 weights, the forward under ``torch.autocast(dtype=torch.bfloat16)``, the
backward and the optimizer step outside it (Lightning's ``bf16-mixed``, which
has no gradient scaler).

Sizes (``--size``): ``full`` (t5-base and t5-large at 1,650 / 3,300 / 6,600
tokens, every path and the three first modes), ``check`` (the part
``benchmarks/gpu_check.sh`` times in its budget: t5-large at 3,300 and 6,600
tokens, flex, eager, plain and plain-sdpa, 1 warm-up and 3 timed runs) and
``dry`` (the tiny model at 64 tokens on the CPU, the paths of ``check``: the
code path, not a measurement; ``--smoke`` is the same). Flags given override
the preset.

Graphs. By default a synthetic block pattern of ``--tokens`` tokens: triplets
of 4 to 7 tokens (mean 5.5) in runs of 1 to ``--group-max`` triplets that share
a head entity (a BFS-like linearisation keeps them adjacent); a pair inside one
run is kind 0 with text position ``j - i``, any other pair kind 1 (the global
bucket), so the local GLM attends within runs. With ``--real-graphs`` the inputs
are real Levi graphs (``glmrag.graph.levi``): ``select_subgraph`` with budgets
``--triplets`` around three seeds of ``random_kg(20000, 200000)``, with a
question, laid out by ``layout_subgraph`` with the MiniLM tokenizer, positions
from ``graph_positions(layout, --position-mode)``; the JSON records their token
counts (``--layouts`` caches the layouts: write them with a cheap run where the
tokenizer is installed, as below, and carry the file to the GPU machine). It
also records the share of 128 x 128 blocks flex skips for the local GLM.

``--backend-check`` first compares, on the device, flex with eager (one attention call with
gradients; a tiny ``T5GLMEncoder``, global and local), the GLM on text positions with the plain HF
T5 it wraps, and the bias-table gradients with activation checkpointing (``checkpoint_grads_ok``;
false means the ``train_ckpt`` cells of that backend time a wrong backward).

    python benchmarks/gpu_glm.py --backend-check                          # on the H200
    python benchmarks/gpu_glm.py --size check --dtype bf16-mixed --modes step step_ckpt --paths flex-global eager-global
    python benchmarks/gpu_glm.py --real-graphs --layouts levi.pkl --models tiny --paths plain --modes forward
    python benchmarks/gpu_glm.py --real-graphs --layouts levi.pkl --out benchmarks/results/gpu_glm_levi.json
    python benchmarks/gpu_glm.py --smoke --backend-check --out /tmp/gpu_glm_smoke.json   # CPU, tiny, < 1 min

Writes ``--out`` (JSON, rewritten after every cell) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import gc
import json
import pickle
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers
from gpu_common import error_text, stop_on_sigterm
from torch.nn.attention.flex_attention import BlockMask
from transformers import MPNetConfig, MPNetModel, T5Config, T5EncoderModel

from glmrag.graph.levi import GRAPH_GLOBAL, SAME_TRIPLE, TEXT_TO_TEXT, LeviLayout, graph_positions, layout_subgraph
from glmrag.graph.subgraph import select_subgraph
from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path
from glmrag.index.synthetic import random_kg
from glmrag.io import atomic_write_text
from glmrag.nn.flex_attention import cpu_flex_backward, flex_graph_attention, graph_block_mask
from glmrag.nn.glm import NUM_EXTRA_BUCKETS, GraphAttentionBias, GraphEncoder, T5GLMEncoder, register_glm_attention
from glmrag.nn.glm_mpnet import MPNetGLMEncoder
from glmrag.nn.graph_attention import eager_graph_attention

CONFIGS = {  # T5 (v1) encoder sizes
    "t5-small": {"d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8, "d_kv": 64},
    "t5-base": {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12, "d_kv": 64},
    "t5-large": {"d_model": 1024, "d_ff": 4096, "num_layers": 24, "num_heads": 16, "d_kv": 64},
    "tiny": {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4, "d_kv": 16},
}
MPNET_CONFIGS = {  # MPNet encoder sizes: all-mpnet-base-v2's, one of T5-large's width and depth, and a dry-run one
    "mpnet-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    "mpnet-large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
    "mpnet-tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128},
}
"""The MPNet-GLM (glmrag.nn.glm_mpnet) at these sizes; its plain reference reads text positions up to
:data:`MPNET_MAX_TOKENS` (a random position table that long; all-mpnet-base-v2's own holds 512)."""
MPNET_MAX_TOKENS = 8192
VOCAB = 32128  # T5's; the MiniLM ids of the real graphs (< 30,522) fit
TOKENS_PER_TRIPLET = 5.5
NUM_BUCKETS = 32 + NUM_EXTRA_BUCKETS  # T5's relative position buckets + the GLM's extra ones
PLAIN = {"plain": "eager", "plain-sdpa": "sdpa"}  # path -> attn_implementation of the HF reference
PATHS = [*PLAIN, "flex-global", "flex-local", "eager-global", "eager-local"]
MODES = ["forward", "train", "train_ckpt", "step", "step_ckpt"]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "bf16-mixed": torch.float32}  # --dtype -> weights
SIZES = {
    "full": {"models": ["t5-base", "t5-large"], "tokens": [1650, 3300, 6600], "triplets": [300, 600, 1200]}
    | {"paths": PATHS, "modes": MODES[:3], "repeats": 5, "warmup": 2},
    "check": {"models": ["t5-large"], "tokens": [3300, 6600], "triplets": [600, 1200]}
    | {"paths": ["flex-global", "eager-global", "plain", "plain-sdpa"], "modes": MODES[:3], "repeats": 3, "warmup": 1},
    "dry": {"models": ["tiny"], "tokens": [64], "triplets": [12]}
    | {"paths": ["flex-global", "eager-global", "plain", "plain-sdpa"], "modes": MODES[:3], "repeats": 1, "warmup": 0},
}
"""``--size`` presets (module docstring); a flag given on the command line overrides its value."""
KG_SIZE = (20_000, 200_000)  # entities, triples of the synthetic KG the real graphs come from


@dataclass
class Graph:
    """One batch-1 input of the GLM, as a ``GLMCollate`` batch holds it (on the CPU until a cell needs it)."""

    input_ids: torch.Tensor  # (1, L) int64
    relative_position: torch.Tensor  # (1, L, L) int32
    kind: torch.Tensor  # (1, L, L) int8
    triplets: int
    source: str  # "synthetic" or "levi"
    question_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_ids.shape[1]

    @classmethod
    def from_layout(cls, layout: LeviLayout, triplets: int, mode: str = "triple") -> Graph:
        position, kind = graph_positions(layout, mode)  # (L, L) each
        return cls(
            input_ids=torch.from_numpy(layout.input_ids)[None],
            relative_position=torch.from_numpy(position.astype(np.int32))[None],
            kind=torch.from_numpy(kind)[None],
            triplets=triplets,
            source="levi",
            question_tokens=layout.num_question_tokens,
        )


def make_graph(num_tokens: int, group_max: int, seed: int = 0) -> Graph:
    """Triplets of 4-7 tokens in runs of 1..group_max sharing an entity; see the module docstring."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 8, (num_tokens,), generator=g)
    lengths = lengths[: int((lengths.cumsum(0) < num_tokens).sum()) + 1]
    triplet = torch.repeat_interleave(torch.arange(len(lengths)), lengths)[:num_tokens]  # (L,)
    sizes = torch.randint(1, group_max + 1, (len(lengths),), generator=g)
    group = torch.repeat_interleave(torch.arange(len(sizes)), sizes)[: len(lengths)][triplet]  # (L,)
    position = torch.arange(num_tokens)
    relative = (position[None, :] - position[:, None]).to(torch.int32)  # (L, L)
    same_run = group[:, None] == group[None, :]  # (L, L)
    kind = torch.where(same_run, SAME_TRIPLE, GRAPH_GLOBAL).to(torch.int8)  # (L, L)
    ids = torch.randint(0, VOCAB, (1, num_tokens), generator=g)
    return Graph(ids, relative[None], kind[None], triplets=int(triplet.max()) + 1, source="synthetic")


def levi_layouts(budgets: list[int], seed: int = 0) -> list[tuple[int, LeviLayout]]:
    """Real Levi layouts (with a question) of subgraphs of ``budgets`` triplets of one synthetic KG.

    One draw of three non-isolated seed entities; ``select_subgraph`` (2 hops) with each budget, so a
    smaller graph is a prefix of a larger one. Returns (selected triplets, layout) per budget.
    """
    kg = random_kg(*KG_SIZE, seed=seed)
    rng = np.random.default_rng(seed)
    seeds = rng.choice(np.unique(kg.triples[:, [0, 2]]), 3, replace=False).tolist()
    question = "which entity connects " + ", ".join(kg.entities[e] for e in seeds) + "?"
    tokenizer = transformers.AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    layouts = []
    for budget in budgets:
        subgraph = select_subgraph(kg, seeds, max_hops=2, max_triplets=budget)
        layouts.append((len(subgraph), layout_subgraph(kg, subgraph, tokenizer, question)))
    return layouts


def cached_layouts(budgets: list[int], path: str | None) -> list[tuple[int, LeviLayout]]:
    """:func:`levi_layouts`, read from or written to the pickle ``path`` (if given) under ``budgets``."""
    cache = Path(path) if path else None
    saved = pickle.loads(cache.read_bytes()) if cache and cache.exists() else {}
    key = tuple(budgets)
    if key not in saved:
        saved[key] = levi_layouts(budgets)
        if cache:
            cache.write_bytes(pickle.dumps(saved))
    return saved[key]


def build_models(
    name: str, paths: list[str], device: torch.device, dtype: torch.dtype, errors: dict[str, str] | None = None
) -> dict[str, torch.nn.Module]:
    """Path -> module, all with one set of randomly initialised weights of a hard-coded T5 size.

    The GLM paths wrap one ``T5EncoderModel``; each plain path is its own HF model whose parameters
    are assigned that encoder's tensors (same storage, so the weights are on the device once). With
    ``errors``, a path that fails to build is left out and its error is recorded there; without, it raises.
    """
    if name in MPNET_CONFIGS:
        return build_mpnet_models(name, paths, device, dtype, errors)
    config = T5Config(vocab_size=VOCAB, dropout_rate=0.0, feed_forward_proj="relu", **CONFIGS[name])
    with torch.device(device):
        t5 = T5EncoderModel._from_config(config, attn_implementation=register_glm_attention(), dtype=dtype)
    t5 = t5.to(device=device, dtype=dtype)
    models: dict[str, torch.nn.Module] = {}
    for path in paths:
        try:
            models[path] = build_path(t5, config, path, device, dtype)
        except Exception as err:
            if errors is None:
                raise
            errors[path] = error_text(err)
    return models


def build_path(
    t5: T5EncoderModel, config: T5Config, path: str, device: torch.device, dtype: torch.dtype
) -> torch.nn.Module:
    """The module of one path over the weights of ``t5`` (see :func:`build_models`)."""
    if path in PLAIN:
        with torch.device(device):
            # A config of its own: _from_config keeps the object, and T5GLMEncoder sets its attention.
            plain = T5EncoderModel._from_config(copy.deepcopy(config), attn_implementation=PLAIN[path], dtype=dtype)
        plain.load_state_dict(t5.state_dict(), assign=True)
        return plain.to(device=device, dtype=dtype)
    backend, attention = path.split("-")
    return T5GLMEncoder(t5, attention=attention, backend=backend).to(device=device, dtype=dtype)


def build_mpnet_models(
    name: str, paths: list[str], device: torch.device, dtype: torch.dtype, errors: dict[str, str] | None = None
) -> dict[str, torch.nn.Module]:
    """:func:`build_models` for an MPNet size: the GLM paths wrap one ``MPNetModel``; ``plain`` is a Hugging Face
    ``MPNetModel`` (eager: MPNet has no SDPA path) over the same tensors; ``plain-sdpa`` is refused."""
    config = MPNetConfig(
        vocab_size=VOCAB,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=MPNET_MAX_TOKENS + 2,
        **MPNET_CONFIGS[name],
    )
    with torch.device(device):
        base = MPNetModel(config, add_pooling_layer=False).to(dtype=dtype)
    models: dict[str, torch.nn.Module] = {}
    for path in paths:
        try:
            if path == "plain-sdpa":
                raise ValueError("MPNet has no SDPA attention in transformers: use path plain")
            if path == "plain":
                with torch.device(device):
                    plain = MPNetModel(copy.deepcopy(config), add_pooling_layer=False).to(dtype=dtype)
                plain.load_state_dict(base.state_dict(), assign=True)
                models[path] = plain
                continue
            backend, attention = path.split("-")
            models[path] = MPNetGLMEncoder(base, attention=attention, backend=backend).to(device=device, dtype=dtype)
        except Exception as err:
            if errors is None:
                raise
            errors[path] = error_text(err)
    return models


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
    """Free the last cell's device memory before the next one's peak is read (CUDA only: a CPU run reads none,
    and a full collection there costs more than its tiny cells)."""
    if device.type == "cuda":
        gc.collect()
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


def run_cell(make: Callable[[], Callable[[], None]], device: torch.device, warmup: int, repeats: int) -> dict:
    """``measure`` of the step ``make()`` returns, with an out-of-memory error (or any other, the step's set-up
    included) recorded instead of raised."""
    try:
        result = measure(make(), device, warmup, repeats)
    except torch.OutOfMemoryError:
        result = {"status": "OOM"}
    except Exception as err:  # a failed compile must not cost the other cells
        text = error_text(err)
        result = {"status": "OOM"} if "out of memory" in text.lower() else {"status": "error", "error": text}
    cleanup(device)
    return result


def t5_of(model: torch.nn.Module) -> T5EncoderModel:
    return model.t5 if isinstance(model, T5GLMEncoder) else model


def set_checkpointing(model: torch.nn.Module, enabled: bool) -> None:
    """Activation checkpointing as training uses it (T5GLMEncoder picks reentrant checkpointing for flex)."""
    if isinstance(model, MPNetGLMEncoder):
        model.gradient_checkpointing = enabled
        return
    if isinstance(model, MPNetModel):
        if enabled:
            raise ValueError("Hugging Face MPNetModel has no gradient checkpointing")
        return
    t5 = t5_of(model)
    if enabled and isinstance(model, T5GLMEncoder):
        model.enable_gradient_checkpointing()
    elif enabled:
        (getattr(t5, "activation_checkpointing_enable", None) or t5.gradient_checkpointing_enable)()
    else:
        (getattr(t5, "activation_checkpointing_disable", None) or t5.gradient_checkpointing_disable)()


def encode(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Token states from a GLM (graph inputs) or a plain T5 (the same ids, text positions). Shapes: -> (B, L, d)."""
    if isinstance(model, GraphEncoder):
        return model(**inputs)
    return model(input_ids=inputs["input_ids"], attention_mask=inputs["token_mask"]).last_hidden_state


def make_step(
    model: torch.nn.Module, mode: str, inputs: dict[str, torch.Tensor], autocast: torch.dtype | None = None
) -> Callable[[], None]:
    """One forward (no grad), one forward + backward of the sum of the outputs, or that and an AdamW step
    (``step`` modes). With ``autocast``, the forward runs under ``torch.autocast`` in that dtype, the backward
    and the optimizer step outside it, as Lightning's ``bf16-mixed`` does."""
    device_type = inputs["input_ids"].device.type
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0) if mode.startswith("step") else None

    def forward_context() -> contextlib.AbstractContextManager:
        if autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type, dtype=autocast)

    def step() -> None:
        if mode == "forward":
            with torch.no_grad(), forward_context():
                encode(model, inputs)
            return
        model.zero_grad(set_to_none=True)
        with forward_context():
            out = encode(model, inputs)
        out.float().sum().backward()
        if optimizer is not None:
            optimizer.step()

    return step


def cell_step(
    model: torch.nn.Module, mode: str, inputs: dict[str, torch.Tensor], autocast: torch.dtype | None
) -> Callable[[], None]:
    """The step of one cell, with the model in its mode's train/eval state and checkpointing."""
    model.train(mode != "forward")
    set_checkpointing(model, mode.endswith("_ckpt"))
    return make_step(model, mode, inputs, autocast)


def device_inputs(graph: Graph, device: torch.device) -> dict[str, torch.Tensor]:
    return {
        "input_ids": graph.input_ids.to(device),
        "token_mask": torch.ones_like(graph.input_ids, dtype=torch.bool, device=device),
        "relative_position": graph.relative_position.to(device),
        "kind": graph.kind.to(device),
    }


def max_rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.float() - expected.float()).abs().max() / expected.float().abs().max().clamp_min(1e-12))


def backend_check(
    device: torch.device, dtype: torch.dtype, heads: int, length: int = 300, report: dict | None = None
) -> dict:
    """Flex against eager on the device: one attention call (float32 with gradients, and ``dtype``), a tiny
    ``T5GLMEncoder`` (global and local); the GLM on text positions against the plain HF T5 it wraps; and the
    bias-table gradients of the tiny GLM with activation checkpointing (``checkpoint_grads_ok``)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 comparisons in full precision
    try:
        return compare_backends(device, dtype, heads, length, {} if report is None else report)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def compare_backends(device: torch.device, dtype: torch.dtype, heads: int, length: int, report: dict) -> dict:
    """The comparisons of :func:`backend_check`: one attention call over ``length`` tokens, the encoders over
    two thirds of that; each figure lands in ``report`` as soon as it is known (a step stopped by its time
    limit keeps them)."""
    g = torch.Generator().manual_seed(0)
    batch, dim = 2, 64
    key_mask = (torch.arange(length)[None] < torch.tensor([[length], [length * 6 // 7]])).to(device)  # (2, L)
    allowed = (torch.rand(batch, length, length, generator=g) < 0.2).to(device)
    allowed = (allowed | torch.eye(length, dtype=torch.bool, device=device)) & key_mask[:, :, None]
    bucket = torch.randint(0, NUM_BUCKETS, (batch, length, length), generator=g).to(device)
    tensors = [torch.randn(batch, heads, length, dim, generator=g).to(device) for _ in range(3)]
    table = torch.randn(NUM_BUCKETS, heads, generator=g).to(device)
    rows = (key_mask[:, None, :] & allowed).any(-1)[:, :, None, None]  # (2, L, 1, 1): rows with a key
    for precision in (torch.float32, dtype):
        outputs = {}
        for name, attention in (("flex", flex_graph_attention), ("eager", eager_graph_attention)):
            leaves = [x.detach().clone().to(precision).requires_grad_() for x in (*tensors, table)]
            bias = GraphAttentionBias(bucket=bucket, table=leaves[3], allowed=allowed, key_mask=key_mask)
            out = attention(*leaves[:3], bias, 1.0) * rows
            out.float().square().sum().backward()
            outputs[name] = [out.detach().float().clone()] + [x.grad.float().clone() for x in leaves]
        for what, f, e in zip(("out", "dq", "dk", "dv", "dtable"), outputs["flex"], outputs["eager"], strict=True):
            report[f"{str(precision).removeprefix('torch.')}_{what}_max_rel_err"] = max_rel_err(f, e)

    models = build_models("tiny", ["plain", *PATHS[2:]], device, dtype)
    graph = device_inputs(make_graph(length * 2 // 3, group_max=4), device)
    with torch.no_grad():
        for attention in ("global", "local"):
            flex, eager = (encode(models[f"{b}-{attention}"].eval(), graph) for b in ("flex", "eager"))
            report[f"encoder_{attention}_max_rel_err"] = max_rel_err(flex, eager)
        # Text positions everywhere (kind 4, j - i): the GLM must be the HF T5 it wraps.
        text = dict(graph, kind=torch.full_like(graph["kind"], TEXT_TO_TEXT))
        report["glm_text_vs_hf_max_rel_err"] = max_rel_err(
            encode(models["eager-global"], text), encode(models["plain"].eval(), text)
        )
    # Pass: every float32 error < 1e-3; in low precision the output and the encoders < 3e-2 (low-precision
    # gradients are reported, not judged: bf16 accumulation order differs between the kernels).
    low = str(dtype).removeprefix("torch.")
    judged = {k: v for k, v in report.items() if k.startswith("float32")}
    judged |= {k: v for k, v in report.items() if k == f"{low}_out_max_rel_err" or k.startswith(("encoder", "glm"))}
    report["ok"] = all(v < (1e-3 if k.startswith("float32") else 3e-2) for k, v in judged.items())

    # Bias-table gradients of a float32 training step, with and without activation checkpointing (as
    # T5GLMEncoder.enable_gradient_checkpointing sets it), against eager without: the table reaches flex as a
    # captured buffer, and CPU flex returns garbage for it under non-reentrant checkpointing (torch 2.13).
    models = build_models("tiny", PATHS[2:], device, torch.float32)
    reference = table_grads(models["eager-global"], graph, checkpointing=False)
    for backend, checkpointing in (("flex", False), ("flex", True), ("eager", True)):
        grads = table_grads(models[f"{backend}-global"], graph, checkpointing)
        report[f"dtable_{backend}{'_ckpt' if checkpointing else ''}_max_rel_err"] = max_rel_err(grads, reference)
    report["checkpoint_grads_ok"] = all(v < 1e-3 for k, v in report.items() if k.startswith("dtable_"))
    return report


def table_grads(model: T5GLMEncoder, inputs: dict[str, torch.Tensor], checkpointing: bool) -> torch.Tensor:
    """Gradients of T5's bias table and the GLM's extra rows after one backward. Shapes: -> (K * H,)."""
    model.train()
    set_checkpointing(model, checkpointing)
    model.zero_grad(set_to_none=True)
    encode(model, inputs).square().sum().backward()
    set_checkpointing(model, False)
    return torch.cat([model.position_table.weight.grad.flatten(), model.extra_bias.grad.flatten()])


def graph_summary(graph: Graph, local: T5GLMEncoder, device: torch.device) -> dict:
    """Token counts, pair kinds and the local GLM's flex block sparsity of one input."""
    inputs = device_inputs(graph, device)
    bias = local.attention_bias(inputs["token_mask"], inputs["relative_position"], inputs["kind"])
    kinds = torch.bincount(graph.kind.flatten().long(), minlength=5) / graph.kind.numel()
    return {
        "source": graph.source,
        "tokens": graph.tokens,
        "triplets": graph.triplets,
        "question_tokens": graph.question_tokens,
        "tokens_per_triplet": round(graph.tokens / max(graph.triplets, 1), 2),
        "kind_fractions": [round(x, 5) for x in kinds.tolist()],
        "allowed_fraction_local": round(bias.allowed.float().mean().item(), 5),
        "skipped_blocks_local_pct": skipped_blocks(graph_block_mask(bias, graph.tokens)),
    }


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
                values += [cell["status"], ""]
        lines.append(f"| {model} | {tokens:,} | {triplets:,} | {path} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="full", choices=sorted(SIZES), help="preset; the flags below override it")
    parser.add_argument("--models", nargs="+", choices=sorted(CONFIGS | MPNET_CONFIGS))
    parser.add_argument("--tokens", type=int, nargs="+", help="synthetic lengths L")
    parser.add_argument("--real-graphs", action="store_true", help="real Levi graphs instead of --tokens")
    parser.add_argument("--triplets", type=int, nargs="+", help="budgets (--real-graphs)")
    parser.add_argument("--position-mode", default="triple", choices=["triple", "path"], help="for --real-graphs")
    parser.add_argument(
        "--layouts",
        help="--real-graphs: read the Levi layouts from this pickle if it exists, else write them there "
        "(build them where the MiniLM tokenizer is installed, carry the small file to the GPU machine)",
    )
    parser.add_argument("--paths", nargs="+", choices=PATHS)
    parser.add_argument("--modes", nargs="+", choices=MODES)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--group-max", type=int, default=8, help="most triplets sharing one entity (synthetic)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES), help="bf16-mixed: as trainer=gpu")
    parser.add_argument("--backend-check", action="store_true", help="compare flex and eager on the device first")
    parser.add_argument("--backend-check-only", action="store_true", help="the backend check and nothing else")
    parser.add_argument("--smoke", action="store_true", help="the same as --size dry (CPU proof)")
    parser.add_argument("--out", default="benchmarks/results/gpu_glm.json")
    args = parser.parse_args(argv)
    if args.smoke:
        args.size = "dry"
    for key, value in SIZES[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, list(value) if isinstance(value, list) else value)
    args.backend_check = args.backend_check or args.backend_check_only
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.size == "dry":
        torch.set_num_threads(1)  # tiny matmuls on a shared CPU: thread hand-offs cost more than the maths
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    # Weights in bf16 only on the GPU (CPU bf16 matmuls are a different, slow code path); bf16-mixed autocasts
    # on either device, as Lightning's bf16-mixed does.
    dtype = DTYPES[args.dtype] if on_gpu or args.dtype == "bf16-mixed" else torch.float32
    autocast = torch.bfloat16 if args.dtype == "bf16-mixed" else None
    # Grad modes x lengths x head counts x checkpoint replays exceed dynamo's default 8 graphs per function;
    # past the limit the compiled flex kernel raises (glmrag.nn.flex_attention), so allow more.
    torch._dynamo.config.recompile_limit = 64
    torch.manual_seed(0)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # FlexAttention's CPU backward is only the unfused reference, which torch guards; CPU runs are smoke tests.
    guard = cpu_flex_backward() if device.type == "cpu" else contextlib.nullcontext()

    result = {
        "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": args.dtype if args.dtype == "bf16-mixed" else str(dtype).removeprefix("torch."),
        "weights_dtype": str(dtype).removeprefix("torch."),
        "autocast": None if autocast is None else str(autocast).removeprefix("torch."),
        "batch": 1,
        "num_buckets": NUM_BUCKETS,
        "args": vars(args),
        "graphs": {},
        "cells": [],
        "errors": [],
    }

    def save() -> None:
        atomic_write_text(out, json.dumps(result, indent=2) + "\n")

    def failed(where: object, error: str) -> None:
        result["errors"].append({"where": where, "error": error})
        print(f"ERROR in {where}: {error}", flush=True)
        save()

    def stopped(signum: int) -> None:
        failed("time limit", f"stopped by signal {signum} after {len(result['cells'])} cells")

    with guard, stop_on_sigterm(stopped):
        if args.backend_check:
            check = result["backend_check"] = {}
            try:
                name = args.models[0]
                heads = CONFIGS[name]["num_heads"] if name in CONFIGS else MPNET_CONFIGS[name]["num_attention_heads"]
                backend_check(device, dtype, heads, length=96 if args.size == "dry" else 300, report=check)
            except Exception as err:  # a failed compile is a result too
                check |= {"ok": False, "error": error_text(err)}
            print("backend check:", json.dumps(check))
            if "error" in check:
                failed("backend_check", check["error"])
            elif not check["ok"]:
                failed(
                    "backend_check", "BACKEND CHECK FAILED: flex and eager disagree on this device (see *_max_rel_err)"
                )
            if not check.get("checkpoint_grads_ok", True):
                failed("backend_check", "CHECKPOINT GRADIENT CHECK FAILED: wrong bias-table gradients (dtable_*)")
            save()
        if args.backend_check_only:
            return result

        start = time.perf_counter()
        try:
            if args.real_graphs:
                layouts = cached_layouts(args.triplets, args.layouts)
                graphs = [Graph.from_layout(layout, n, args.position_mode) for n, layout in layouts]
            else:
                graphs = [make_graph(tokens, args.group_max) for tokens in args.tokens]
        except Exception as err:  # no inputs, no cells: the JSON still says why
            failed("graphs", error_text(err))
            return result
        result["graph_source"] = (
            f"levi: random_kg{KG_SIZE}, select_subgraph 2 hops, positions {args.position_mode!r}"
            if args.real_graphs
            else f"synthetic block pattern, {TOKENS_PER_TRIPLET} tokens per triplet"
        )
        result["graph_build_s"] = round(time.perf_counter() - start, 2)
        try:
            # The local GLM's mask depends on the pair kinds only, so a tiny encoder's bias serves every size.
            local = T5GLMEncoder.from_config(T5Config(vocab_size=VOCAB, **CONFIGS["tiny"]), attention="local").to(
                device
            )
            for graph in graphs:
                result["graphs"][str(graph.tokens)] = graph_summary(graph, local, device)
            del local
        except Exception as err:
            failed("graph_summary", error_text(err))
        save()
        for name in args.models:
            build_errors: dict[str, str] = {}
            try:
                models = build_models(name, args.paths, device, dtype, build_errors)
            except Exception as err:  # the shared T5 itself
                models, build_errors = {}, dict.fromkeys(args.paths, error_text(err))
            for path, error in build_errors.items():
                failed({"model": name, "path": path, "stage": "build"}, error)
            for graph in graphs:
                try:
                    inputs = device_inputs(graph, device)
                except Exception as err:
                    failed({"model": name, "tokens": graph.tokens, "stage": "inputs"}, error_text(err))
                    continue
                for path, model in models.items():
                    for mode in args.modes:
                        for other in models.values():  # no gradients of earlier cells in the baseline
                            other.zero_grad(set_to_none=True)
                        make = functools.partial(cell_step, model, mode, inputs, autocast)
                        cell = {"model": name, "tokens": graph.tokens, "triplets": graph.triplets}
                        cell |= {"path": path, "mode": mode}
                        if isinstance(model, MPNetModel) and "ckpt" in mode:  # nothing to compare: no such mode
                            cell |= {"status": "n/a", "why": "Hugging Face MPNetModel has no gradient checkpointing"}
                        else:
                            cell |= run_cell(make, device, args.warmup, args.repeats)
                        result["cells"].append(cell)
                        print(json.dumps({k: v for k, v in cell.items() if k != "ms_all"}), flush=True)
                        if cell["status"] == "error":
                            failed({k: cell[k] for k in ("model", "tokens", "path", "mode")}, cell["error"])
                        save()
                del inputs
                cleanup(device)
            del models
            cleanup(device)
    save()
    print(f"\n{result['device']}, torch {result['torch']}, {result['dtype']}, batch 1 (written to {out})\n")
    print(markdown(result["cells"], args.modes))
    return result


if __name__ == "__main__":
    raise SystemExit(1 if main()["errors"] else 0)
