"""Graph-biased attention by FlexAttention (:func:`flex_graph_attention`).

It computes what :func:`glmrag.nn.graph_attention.eager_graph_attention` computes without materialising the
``(B, H, L, L)`` bias, and skips 128 x 128 blocks with no allowed pair.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
from torch.nn.attention import flex_attention as _flex_module
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

if TYPE_CHECKING:
    from glmrag.nn.attention_bias import GraphAttentionBias

__all__ = [
    "FlexFallbackError",
    "cpu_flex_backward",
    "flex_graph_attention",
    "graph_block_mask",
]

_COMPILED_FLEX: Callable[..., torch.Tensor] | None = None
# One cached block mask: all layers of one forward (and the recomputation under
# activation checkpointing) share one bias object, so one entry serves them all.
_LAST_BLOCK_MASK: tuple[tuple[Callable[[], object], ...], int, BlockMask] | None = None


def graph_block_mask(bias: GraphAttentionBias, seq_len: int) -> BlockMask:
    """The ``BlockMask`` of pairs that may attend: ``allowed[b, i, j] & key_mask[b, j]``.

    Broadcast over heads. Blocks (128 x 128) with no allowed pair are skipped
    by the kernel; blocks with some are masked element by element.

    Shapes:
        bias.allowed: (B, L, L) bool or None; bias.key_mask: (B, L) bool
        output: BlockMask of shape (B, 1, L, L)
    """
    key_mask, allowed = bias.key_mask, bias.allowed
    if allowed is None:

        def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
            return key_mask[b, kv_idx]

    else:

        def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
            return allowed[b, q_idx, kv_idx] & key_mask[b, kv_idx]

    return create_block_mask(mask_mod, key_mask.shape[0], None, seq_len, seq_len, device=key_mask.device)


def _cached_block_mask(bias: GraphAttentionBias, seq_len: int) -> BlockMask:
    """``graph_block_mask``, reused while the same bias object with the same mask tensors comes back.

    The bias tensors are treated as immutable: editing ``allowed`` or ``key_mask``
    in place between calls is not seen (assigning new tensors is).
    """
    global _LAST_BLOCK_MASK
    given = getattr(bias, "block_mask", None)
    if given is not None:
        return given
    mask_tensors = (bias.key_mask, bias.allowed)
    if _LAST_BLOCK_MASK is not None:
        refs, last_len, block_mask = _LAST_BLOCK_MASK
        if last_len == seq_len and all(ref() is obj for ref, obj in zip(refs, (bias, *mask_tensors), strict=True)):
            return block_mask
    block_mask = graph_block_mask(bias, seq_len)
    try:
        refs = tuple(weakref.ref(obj) if obj is not None else _none_ref for obj in (bias, *mask_tensors))
        _LAST_BLOCK_MASK = (refs, seq_len, block_mask)
    except TypeError:  # a bias type without weakref support: no caching
        _LAST_BLOCK_MASK = None
    return block_mask


def _none_ref() -> None:
    """Stands in for a weak reference to ``None`` (``allowed`` of the global GLM)."""
    return None


class FlexFallbackError(RuntimeError):
    """The compiled FlexAttention kernel ran uncompiled on CUDA: it would take the unfused path."""


def _fused_flex(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    score_mod: Callable[..., torch.Tensor],
    block_mask: BlockMask,
    scale: float,
) -> torch.Tensor:
    """``flex_attention``, to be compiled; raises :class:`FlexFallbackError` when it runs as plain Python.

    Under dynamo ``is_compiling()`` is a constant True and the check leaves the graph; only a frame dynamo
    hands back to Python (a compile error it suppressed, dynamo disabled) reaches the raise.
    """
    if not torch.compiler.is_compiling():
        raise FlexFallbackError(_fallback_reason(query.device))
    return flex_attention(query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale)


def _fallback_reason(device: torch.device) -> str:
    """Why dynamo may have run the kernel uncompiled, with what it logged during the call."""
    from torch._dynamo import config

    settings = ", ".join(
        f"{name}={getattr(config, name, '?')}" for name in ("disable", "suppress_errors", "recompile_limit")
    )
    logged = "; ".join(_DYNAMO_WARNINGS.messages[-3:]) or "nothing"
    return (
        f"FlexAttention ran uncompiled on {device}, which takes its unfused path (the whole (B, H, L, L) scores "
        f"in memory, several times slower). torch._dynamo.config: {settings}; dynamo logged: {logged}. Run it "
        "compiled (dynamo enabled and suppress_errors False, so that a compile error is raised where it can be "
        "fixed), or use backend 'eager'."
    )


class _RecentWarnings(logging.Handler):
    """Keeps the messages of the warnings torch._dynamo logs while the compiled kernel runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages = [*self.messages[-9:], record.getMessage().splitlines()[0][:300]]


_DYNAMO_WARNINGS = _RecentWarnings()


@contextlib.contextmanager
def _dynamo_warnings_kept() -> Iterator[None]:
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(_DYNAMO_WARNINGS)
    try:
        yield
    finally:
        logger.removeHandler(_DYNAMO_WARNINGS)


def _flex_kernel(device: torch.device) -> Callable[..., torch.Tensor]:
    """:func:`_fused_flex` compiled with ``fullgraph=True`` on CUDA (once per process), else ``flex_attention``.

    ``fullgraph``: a graph break inside ``flex_attention`` would run it eagerly, the unfused path, unnoticed;
    with it a break (and dynamo's recompile limit) raises instead.
    """
    global _COMPILED_FLEX
    if device.type != "cuda":
        return flex_attention
    if _COMPILED_FLEX is None:
        _COMPILED_FLEX = torch.compile(_fused_flex, fullgraph=True)
    return _COMPILED_FLEX


def flex_graph_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: GraphAttentionBias, scaling: float
) -> torch.Tensor:
    """Graph-biased attention with FlexAttention; equals ``eager_graph_attention`` on every row with an allowed key.

    A row with no allowed key (a padding query masked by ``allowed``) returns 0
    where the eager path returns the mean of the values. If ``bias`` has a
    ``block_mask`` attribute that is not None, it is used as is (build it once
    per forward with ``graph_block_mask``); otherwise the block mask is built
    here and reused while the same bias object is passed again (all layers of
    one forward).

    A row with no allowed key returns 0 (its log-sum-exp is -inf) where the eager path returns the mean of
    the values; neither is NaN and both give q and k zero gradient there, and callers ignore padding rows.
    There is no attention dropout (``glmrag.nn.glm.graph_attention`` refuses flex with ``dropout > 0``).
    The local GLM's cost follows its number of allowed pairs, provided the token order keeps graph
    neighbours near each other (block sparsity is counted on the linearised sequence).

    Memory: 600 triplets are about 3,300 tokens (GLM-RAG Table 7 regime, T5-large: 16 heads, 24 layers).
    The eager path holds per layer a (H, L, L) float32 bias and scores, 0.70 GB each per example, and
    training keeps the float32 softmax and its bf16 copy (about 25 GB over 24 layers). This path holds one
    (L, L) int32 bucket tensor (44 MB, shared by all layers), the table, an (L, L) bool mask (11 MB) and a
    block mask of (L/128)^2 entries; the backward recomputes scores from q, k and the per-row
    log-sum-exp, so nothing quadratic is saved per layer.

    Compilation: on CUDA the kernel is ``flex_attention`` compiled once per process with
    ``fullgraph=True``, and it fails loudly rather than fall back: a graph break or dynamo's recompile
    limit raises, and a kernel dynamo runs uncompiled raises :class:`FlexFallbackError` with the reason
    (the unfused path would materialise the scores, seen only as slowness and memory). On CPU the
    uncompiled, unfused reference runs on purpose (slow, for tests); torch refuses its backward when q, k
    or v require grad, a guard :func:`cpu_flex_backward` lifts. Gradients reach ``table`` (captured by the
    ``score_mod`` closure) on both devices: dynamo lifts captured tensors into the kernel's buffers.

    Shapes:
        query, key, value: (B, H, L, D)
        bias.bucket: (B, L, L) integer in [0, K); bias.table: (K, H)
        bias.allowed: (B, L, L) bool or None; bias.key_mask: (B, L) bool
        output: (B, L, H, D), contiguous
    """
    seq_len = query.shape[-2]
    if key.shape[-2] != seq_len or bias.bucket.shape[-2:] != (seq_len, seq_len):
        raise ValueError(
            f"flex_graph_attention is self-attention over one sequence: query length {seq_len}, "
            f"key length {key.shape[-2]}, bucket shape {tuple(bias.bucket.shape)}; expected bucket (B, L, L)"
        )
    table, bucket = bias.table, bias.bucket

    def score_mod(
        score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        # The cast lets the bucket tensor be any integer dtype (int8/int16 halve its memory traffic).
        return score + table[bucket[b, q_idx, kv_idx].to(torch.int64), h]

    block_mask = _cached_block_mask(bias, seq_len)
    kernel = _flex_kernel(query.device)
    try:
        if kernel is flex_attention:
            with warnings.catch_warnings():
                # On CPU the uncompiled, unfused path is deliberate (a reference for tests); elsewhere the warning
                # is never hidden.
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
                output = kernel(query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scaling)
        else:
            with _dynamo_warnings_kept():
                output = kernel(query, key, value, score_mod, block_mask, scaling)
    except NotImplementedError as err:
        if query.device.type != "cpu":
            raise
        raise RuntimeError(
            f"{err} flex_graph_attention: FlexAttention has no backward on CPU; train on CPU with backend 'eager' "
            "(tests may wrap the call in glmrag.nn.flex_attention.cpu_flex_backward())"
        ) from err
    return output.transpose(1, 2).contiguous()  # (B, H, L, D) -> (B, L, H, D)


@contextlib.contextmanager
def cpu_flex_backward() -> Iterator[None]:
    """Let uncompiled FlexAttention run its backward on CPU (tests and smoke runs only).

    Torch refuses CPU inputs that require grad because its compiled CPU kernel
    is inference only; the uncompiled path used here on CPU differentiates the
    unfused math reference, which is correct but slow. This lifts that check
    for the duration of the block and restores it afterwards.
    """
    original = getattr(_flex_module, "_validate_device", None)
    if original is None:  # a torch without the guard
        yield
        return

    def validate_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if query.device.type != "cpu":
            original(query, key, value)

    _flex_module._validate_device = validate_device
    try:
        yield
    finally:
        _flex_module._validate_device = original
