"""The graph-aware attention bias of the GLM encoder, as T5's attention receives it (``position_bias``).

Its own module so that the encoder (:mod:`glmrag.nn.glm`) and the attention kernels
(:mod:`glmrag.nn.flex_attention`) both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class GraphAttentionBias:
    """What T5's attention needs to add the graph-aware bias and mask: passed as ``position_bias``.

    Shapes: ``B`` graphs of ``L`` tokens, ``K`` buckets, ``H`` heads.
    """

    bucket: torch.Tensor
    """(B, L, L) int bucket id of each (query, key) pair, in ``[0, K)``."""
    table: torch.Tensor
    """(K, H) bias of each bucket and head; gradients reach T5's table and the extra rows."""
    allowed: torch.Tensor | None
    """(B, L, L) bool pairs that may attend (the local GLM); None: every pair."""
    key_mask: torch.Tensor
    """(B, L) bool real (not padding) tokens."""
    backend: str = "eager"
    """``eager`` (dense bias) or ``flex`` (FlexAttention ``score_mod``, for the GPU)."""
    dtype: torch.dtype | None = None
    """The dtype the attention computes in, which :meth:`dense_bias` is built in: the autocast dtype under
    autocast, else the states' (:meth:`~glmrag.nn.glm.T5GLMEncoder.compute_dtype`); None: the table's. Under
    bf16 a float32 bias would double the largest tensor of the eager path (16 x 6,600^2 x 4 B = 2.8 GB at
    T5-large's 16 heads and 6,600 tokens), and the scores it is added to come out of a bf16 matmul anyway."""
    _dense: torch.Tensor | None = field(default=None, init=False, repr=False)
    _sdpa_mask: torch.Tensor | None = field(default=None, init=False, repr=False)

    def dense_bias(self) -> torch.Tensor:
        """The ``(B, H, L, L)`` bias of the eager path in :attr:`dtype`, gathered once and shared by every layer
        (as T5 shares its position bias); the mask is applied separately."""
        if self._dense is None:
            table = self.table if self.dtype is None else self.table.to(self.dtype)  # (K, H): cast before the gather
            self._dense = nn.functional.embedding(self.bucket.long(), table).permute(0, 3, 1, 2)  # (B, H, L, L)
        return self._dense

    def sdpa_mask(self) -> torch.Tensor:
        """The ``(B, H, L, L)`` float32 additive mask of the SDPA path: the bias, ``finfo.min`` where a pair may
        not attend (:func:`~glmrag.nn.graph_attention.sdpa_graph_attention`); built once, shared by every layer.
        Only float32 states take that path (:func:`~glmrag.nn.glm.graph_attention`), so it is float32 always.
        """
        if self._sdpa_mask is None:
            bias = nn.functional.embedding(self.bucket.long(), self.table.float()).permute(0, 3, 1, 2)  # (B,H,L,L)
            self._sdpa_mask = bias.masked_fill(~self.keep(), torch.finfo(torch.float32).min)
        return self._sdpa_mask

    def keep(self) -> torch.Tensor:
        """Pairs that may attend: ``allowed & key_mask``. Shapes: -> ``(B, 1, 1 or L, L)`` bool."""
        keep = self.key_mask[:, None, None, :]  # (B, 1, 1, L)
        return keep if self.allowed is None else keep & self.allowed[:, None]  # (B, 1, L, L)
