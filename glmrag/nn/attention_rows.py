"""Attention rows of chosen (layer, head) pairs, without materialising every layer x head x L x L map.

HyperAddress reads "addressing heads": the attention from the question tokens to each entity's mention
tokens in a few heads (Read the Route §3, §4.2; App. A.5 for the baselines). ``output_attentions=True``
would force the eager path and return (B, H, L, L) for every layer. Instead, inside
:func:`capture_attention_rows` an attention function registered with transformers computes
``softmax(q_rows . K^T * scaling + mask_rows)`` in float32 for the requested heads and query rows only,
with the model's own mask, and otherwise runs the normal attention (:data:`ROWS_SDPA`,
:data:`ROWS_EAGER`), so the model's outputs are unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask, sdpa_mask

ROWS_SDPA = "rows_sdpa"
"""Attention implementation: rows captured, the rest by ``sdpa`` (boolean masks)."""
ROWS_EAGER = "rows_eager"
"""Attention implementation: rows captured, the rest by the model's eager function (additive float masks)."""


@dataclass
class AttentionRows:
    """The captured rows. ``pairs`` fixes the order of :attr:`weights`' second axis."""

    pairs: list[tuple[int, int]]
    """(layer, head) pairs, sorted."""
    rows: torch.Tensor
    """(B, R) int64 query positions whose attention is kept."""
    by_layer: dict[int, torch.Tensor] = field(default_factory=dict)
    """Layer -> (B, heads of that layer, R, S) float32, filled during the forward pass."""

    def heads_of(self, layer: int) -> list[int]:
        return [h for lay, h in self.pairs if lay == layer]

    @property
    def weights(self) -> torch.Tensor:
        """(B, len(pairs), R, S) float32 attention probabilities, in :attr:`pairs` order."""
        missing = sorted({lay for lay, _ in self.pairs} - set(self.by_layer))
        if missing:
            raise RuntimeError(
                f"no attention captured for layers {missing}: run the model's forward inside "
                "capture_attention_rows, and check the layer indices against config.num_hidden_layers"
            )
        return torch.cat([self.by_layer[lay] for lay in sorted(self.by_layer)], dim=1)


_ACTIVE: ContextVar[AttentionRows | None] = ContextVar("attention_rows", default=None)


def rows_of(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    heads: Sequence[int],
    rows: torch.Tensor,
    scaling: float,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention probabilities of query ``rows`` for ``heads`` only.

    ``sinks`` (H,) are per-head attention-sink logits (GPT-OSS ``s_aux``): a sink joins every row's
    softmax as one more key and takes its share of the probability, so a row then sums to less than 1.

    Shapes: ``query`` (B, H, L, d), ``key`` (B, H_kv, S, d), ``attention_mask``
    (B, 1 or H, L, S) bool (True: attend) or float (additive), or None (causal);
    ``rows`` (B, R) -> (B, len(heads), R, S) float32.
    """
    b, n_heads, length, d = query.shape
    s = key.shape[2]
    groups = n_heads // key.shape[1]
    rows = rows.expand(b, -1)  # one row set may serve the whole batch
    head_idx = torch.as_tensor(list(heads), device=query.device)
    q = query[:, head_idx]  # (B, h, L, d)
    q = torch.gather(q, 2, rows[:, None, :, None].expand(b, len(heads), rows.shape[1], d))  # (B, h, R, d)
    k = key[:, head_idx // groups]  # (B, h, S, d): a query head reads its key-value group
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scaling  # (B, h, R, S)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is None:
        allowed = torch.arange(s, device=query.device)[None, :] <= rows[:, :, None] + (s - length)  # (B, R, S)
        scores = scores.masked_fill(~allowed[:, None], torch.finfo(torch.float32).min)
    else:
        mask = attention_mask[:, :, :, :s]  # (B, 1|H, L, S)
        mask = mask[:, head_idx] if mask.shape[1] > 1 else mask
        mask = torch.gather(mask, 2, rows[:, None, :, None].expand(b, mask.shape[1], rows.shape[1], s))
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
        else:
            scores = scores + mask.float()
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    sink = sinks.float()[head_idx].reshape(1, -1, 1, 1).expand(b, -1, rows.shape[1], 1)  # (B, h, R, 1)
    return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]  # (B, h, R, S)


def _capture(module, query, key, attention_mask, scaling, kwargs) -> None:
    request = _ACTIVE.get()
    layer = getattr(module, "layer_idx", None)
    if request is None or layer is None:
        return
    heads = request.heads_of(layer)
    if not heads:
        return
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    rows = request.rows.to(query.device)
    request.by_layer[layer] = rows_of(
        module, query, key, attention_mask, heads, rows, scale, kwargs.get("softcap"), kwargs.get("s_aux")
    )


def rows_sdpa_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """``sdpa`` attention that also captures the requested rows (see the module docstring)."""
    _capture(module, query, key, attention_mask, scaling, kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def rows_eager_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The model's own eager attention that also captures the requested rows."""
    _capture(module, query, key, attention_mask, scaling, kwargs)
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:  # a model without its own eager attention: the rows are captured, sdpa computes the rest
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    kwargs.pop("output_attentions", None)
    return eager(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def register() -> None:
    """Register :data:`ROWS_SDPA` and :data:`ROWS_EAGER` (idempotent)."""
    AttentionInterface.register(ROWS_SDPA, rows_sdpa_forward)
    AttentionInterface.register(ROWS_EAGER, rows_eager_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ROWS_SDPA, sdpa_mask)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ROWS_EAGER, eager_mask)


def _pairs(heads: Mapping[int, Sequence[int]] | Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    items = [(lay, h) for lay, hs in heads.items() for h in hs] if isinstance(heads, Mapping) else list(heads)
    return sorted({(int(lay), int(h)) for lay, h in items})


@contextmanager
def capture_attention_rows(
    model: torch.nn.Module,
    heads: Mapping[int, Sequence[int]] | Sequence[tuple[int, int]],
    rows: torch.Tensor,
    base: str = "sdpa",
) -> Iterator[AttentionRows]:
    """Within the block, every forward of ``model`` records the attention of ``rows`` for ``heads``.

    ``heads``: (layer, head) pairs, or a map layer -> heads; ``rows``: (B, R)
    query positions (or (R,) for every batch item); ``base``: ``sdpa`` or
    ``eager``, the implementation that computes the model's outputs meanwhile.
    The model's previous attention implementation is restored on exit.

    The rows are (B, heads, R, S). The mask is the model's own (padding, sliding window) or, when
    transformers skipped it as plainly causal, ``key <= row + (S - L)``; grouped-query heads read their
    shared key head; logit soft-capping is applied as eager Gemma does; attention sinks (``s_aux``) are
    refused. The mask builder is registered under the same name in ``AttentionMaskInterface``.

    >>> with capture_attention_rows(model, [(3, 1), (5, 0)], question_positions) as captured:  # doctest: +SKIP
    ...     model(input_ids)
    >>> captured.weights.shape  # (B, 2, R, S)  # doctest: +SKIP
    """
    if base not in ("sdpa", "eager"):
        raise ValueError(f"base={base!r}; expected 'sdpa' or 'eager'")
    register()
    rows = torch.as_tensor(rows, dtype=torch.long)
    rows = rows[None] if rows.ndim == 1 else rows
    request = AttentionRows(_pairs(heads), rows)
    previous = model.config._attn_implementation
    model.set_attn_implementation(ROWS_SDPA if base == "sdpa" else ROWS_EAGER)
    token = _ACTIVE.set(request)
    try:
        yield request
    finally:
        _ACTIVE.reset(token)
        model.set_attn_implementation(previous)
