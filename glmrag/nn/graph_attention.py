"""Graph-biased self-attention: an eager reference, an SDPA path and the dispatch to them or FlexAttention.

The GLM's attention bias is looked up per (query, key) pair from a small trainable table, by a graph-aware
bucket id instead of the encoder's text relative position:

    scores[b, h, i, j] = q[b, h, i] · k[b, h, j] * scaling + table[bucket[b, i, j], h]

Pairs that may not attend (``allowed`` False in the local GLM, or a padding key) are masked before the
softmax. Every path takes the bias as a :class:`~glmrag.nn.attention_bias.GraphAttentionBias`;
:func:`eager_graph_attention` is the reference the others are tested against. The ``eager`` backend
(:func:`attend`) runs SDPA with a float32 mask when no dropout applies and the states are float32, else the
reference; ``flex`` is :mod:`glmrag.nn.flex_attention`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from glmrag.nn.attention_bias import GraphAttentionBias
from glmrag.nn.flex_attention import flex_graph_attention


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: GraphAttentionBias,
    scaling: float,
    dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """Graph-biased attention by the bias's backend: flex, else SDPA (float32, no dropout), else the reference.

    Shapes: **query**, **key**, **value** ``(B, H, L, D)`` -> ``(B, L, H, D)``.
    """
    if bias.backend == "flex":
        if dropout > 0 and training:
            raise ValueError(
                f"the flex backend got attention dropout {dropout}, which FlexAttention does not support; "
                "set dropout_rate: 0 (T5) or attention_probs_dropout_prob: 0 (MPNet) in the GLM encoder's config, "
                "or use backend 'eager'"
            )
        return flex_graph_attention(query, key, value, bias, scaling)
    if (dropout == 0.0 or not training) and query.dtype == torch.float32:
        return sdpa_graph_attention(query, key, value, bias, scaling)
    return eager_graph_attention(query, key, value, bias, scaling, dropout, training)


def eager_graph_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: GraphAttentionBias,
    scaling: float,
    dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """Reference graph-biased attention with a dense (B, H, L, L) bias.

    Masked pairs get ``finfo(float32).min``, so a fully masked row softmaxes to
    a uniform row (never NaN). The softmax runs in float32 and its result is
    cast to ``value.dtype`` before dropout and the value product.

    Shapes:
        query, key, value: (B, H, L, D)
        bias.bucket: (B, L, L) integer in [0, K); bias.table: (K, H)
        bias.allowed: (B, L, L) bool or None; bias.key_mask: (B, L) bool
        output: (B, L, H, D), contiguous (what T5Attention reshapes to (B, L, H * D))
    """
    scores = torch.matmul(query, key.transpose(2, 3)).float()  # (B, H, L, L)
    if scaling != 1.0:
        scores = scores * scaling
    scores = scores + bias.dense_bias()  # (B, H, L, L) float32: a bf16 bias is promoted in the add, not copied
    keep = bias.key_mask[:, None, None, :]  # (B, 1, 1, L)
    if bias.allowed is not None:
        keep = keep & bias.allowed[:, None]  # (B, 1, L, L)
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1).to(value.dtype)  # (B, H, L, L)
    weights = F.dropout(weights, p=dropout, training=training)
    output = torch.matmul(weights, value)  # (B, H, L, D)
    return output.transpose(1, 2).contiguous()  # (B, L, H, D)


def sdpa_graph_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: GraphAttentionBias, scaling: float
) -> torch.Tensor:
    """``eager_graph_attention`` without dropout, by ``F.scaled_dot_product_attention`` with a float mask.

    The mask is ``bias.sdpa_mask()``: the dense bias with ``finfo(float32).min`` at pairs that may not attend,
    so a partly masked row softmaxes exactly as in the eager path. A row with no allowed key (a padding query
    of the local GLM) would see ``q . k + finfo.min``: the same uniform weights, but a gradient into ``q`` and
    ``k`` through the added scores where the eager path's ``masked_fill`` gives none; its query is zeroed, so
    that row's output (the mean of the values) and every gradient equal the eager path's.

    Shapes: as :func:`eager_graph_attention`; float32 states -> ``(B, L, H, D)``, contiguous.
    """
    mask = bias.sdpa_mask()  # (B, H, L, L)
    if bias.allowed is not None:
        has_key = bias.keep().any(dim=-1, keepdim=True)  # (B, 1, L, 1)
        query = query * has_key
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask.to(query.dtype), scale=scaling)
    return output.transpose(1, 2).contiguous()  # (B, H, L, D) -> (B, L, H, D)
