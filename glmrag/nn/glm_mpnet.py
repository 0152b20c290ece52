"""The GLM on MPNet: a pretrained MPNet encoder (all-mpnet-base-v2, offline) reading a Levi graph.

MPNet's encoder has T5's attention position machinery: one ``relative_attention_bias`` table shared by every
layer, indexed by T5's bidirectional bucketing (32 buckets, max distance 128; ``MPNetEncoder.
relative_position_bucket`` equals ``T5Attention._relative_position_bucket``, tested). So the GLM's graph-aware
buckets and its three extra buckets (GLM-RAG App. B) index that table exactly as they index T5's
(:class:`~glmrag.nn.glm.GraphEncoder`). Unlike T5, MPNet also adds learned absolute position embeddings, which
a graph does not define; :func:`absolute_positions` gives each token one (``model.glm.absolute_positions``,
docs/fidelity.md): ``sentence`` (default) is the token's place in the longest positioned sentence that ends at
it, so a chain (``path`` positions), a linear layout and the question read exactly as MPNet reads their text,
and a Levi graph's tokens get their place in their triple's sentence whatever the node order.

The layers are MPNet's own ``MPNetLayer`` modules; each ``MPNetSelfAttention`` becomes a
:class:`GraphSelfAttention` (the same parameters, so Hugging Face weights load as they are), which reads a
:class:`~glmrag.nn.attention_bias.GraphAttentionBias` passed as ``position_bias`` and keeps MPNet's own path for
a tensor bias.
"""

from __future__ import annotations

import copy
import functools
import math

import torch
import torch.utils.checkpoint
from torch import nn
from transformers import MPNetConfig, MPNetModel
from transformers.models.mpnet.modeling_mpnet import MPNetSelfAttention

from glmrag.graph.levi import SAME_TRIPLE, TEXT_TO_TEXT
from glmrag.nn.attention_bias import GraphAttentionBias
from glmrag.nn.glm import GraphEncoder
from glmrag.nn.graph_attention import attend

ABSOLUTE_POSITIONS = ("sentence", "sequence", "constant")
"""How MPNet's absolute position of a graph token is chosen (:func:`absolute_positions`)."""


def absolute_positions(
    relative_position: torch.Tensor, kind: torch.Tensor, token_mask: torch.Tensor, mode: str = "sentence"
) -> torch.Tensor:
    """Each token's absolute position (0-based) inside a Levi graph.

    ``sentence``: ``max_j -relative_position[i, j]`` over the keys ``j`` positioned relative to ``i`` (kinds 0
    and 4): how far back the farthest token of a sentence through ``i`` lies. A chain in ``path`` mode, a
    linear layout and the question get ``0, 1, 2, ...`` as in their text; a triple's head, relation and tail
    tokens their place in ``head relation tail`` (the largest over the triples of a shared node). ``sequence``:
    the index in the layout (what MPNet would read; depends on the node order). ``constant``: 0 everywhere.

    Shapes: **relative_position**, **kind** ``(B, L, L)``, **token_mask** ``(B, L)`` -> ``(B, L)`` int64.
    """
    if mode not in ABSOLUTE_POSITIONS:
        raise ValueError(f"absolute_positions must be one of {ABSOLUTE_POSITIONS}, got {mode!r}")
    batch, length = token_mask.shape
    if mode == "sequence":
        return torch.arange(length, device=token_mask.device).expand(batch, length)
    if mode == "constant":
        return token_mask.new_zeros(batch, length, dtype=torch.long)
    positioned = ((kind == SAME_TRIPLE) | (kind == TEXT_TO_TEXT)) & token_mask[:, None, :]  # (B, L, L)
    back = torch.where(positioned, -relative_position.long(), 0)  # (B, L, L)
    return back.amax(dim=-1).clamp(min=0)  # (B, L)


class GraphSelfAttention(MPNetSelfAttention):
    """``MPNetSelfAttention`` that reads a :class:`GraphAttentionBias` (MPNet's own forward for a tensor bias).

    MPNet scales scores by ``1 / sqrt(head size)`` and adds the bias, as T5 adds its own unscaled.
    """

    def forward(self, hidden_states, attention_mask=None, position_bias=None, output_attentions=False, **kwargs):
        """Shapes: **hidden_states** ``(B, L, d)`` -> ``((B, L, d),)``."""
        if not isinstance(position_bias, GraphAttentionBias):
            return super().forward(hidden_states, attention_mask, position_bias, output_attentions, **kwargs)
        if attention_mask is not None or output_attentions:
            raise ValueError("a GraphAttentionBias carries its own mask and returns no attention weights")
        shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)  # (B, L, H, D)
        q, k, v = (proj(hidden_states).view(shape).transpose(1, 2) for proj in (self.q, self.k, self.v))  # (B,H,L,D)
        scaling = 1.0 / math.sqrt(self.attention_head_size)
        context = attend(q, k, v, position_bias, scaling, self.dropout.p, self.training)  # (B, L, H, D)
        return (self.o(context.reshape(*hidden_states.shape[:-1], self.all_head_size)),)  # (B, L, d)


class MPNetGLMEncoder(GraphEncoder):
    """An MPNet encoder reading Levi graphs with graph-aware relative positions.

    Args:
        mpnet: the model (its pooler, if any, is unused); each self-attention becomes a :class:`GraphSelfAttention`.
        attention: ``global`` or ``local``; backend: ``eager`` or ``flex`` (:class:`~glmrag.nn.glm.GraphEncoder`).
        absolute_positions: :data:`ABSOLUTE_POSITIONS` (:func:`absolute_positions`).
    """

    backbone = "mpnet"

    def __init__(
        self, mpnet: MPNetModel, attention: str = "global", backend: str = "eager", absolute_positions: str = "sentence"
    ) -> None:
        super().__init__(attention, backend)
        if absolute_positions not in ABSOLUTE_POSITIONS:
            raise ValueError(f"absolute_positions must be one of {ABSOLUTE_POSITIONS}, got {absolute_positions!r}")
        for module in mpnet.modules():
            if type(module) is MPNetSelfAttention:
                module.__class__ = GraphSelfAttention  # same parameters and state-dict keys; picklable
                if backend == "flex":
                    module.dropout.p = 0.0  # FlexAttention has no attention-probability dropout
        self.mpnet, self.absolute_positions = mpnet, absolute_positions
        self.gradient_checkpointing = False
        self.init_extra_buckets()

    @classmethod
    def from_pretrained(cls, name_or_path: str, **kwargs) -> MPNetGLMEncoder:
        """The pretrained encoder of ``name_or_path`` (a hub name, or a folder such as the assembled
        ``offline:all-mpnet-base-v2``)."""
        return cls(MPNetModel.from_pretrained(name_or_path, add_pooling_layer=False), **kwargs)

    @classmethod
    def from_config(cls, config: MPNetConfig, **kwargs) -> MPNetGLMEncoder:
        """A randomly initialised encoder (tests); ``config`` itself is left unchanged."""
        return cls(MPNetModel(copy.deepcopy(config), add_pooling_layer=False), **kwargs)

    def enable_gradient_checkpointing(self) -> None:
        """Recompute each trainable layer in the backward pass (reentrant for flex, as the T5 path)."""
        self.gradient_checkpointing = True

    def checkpointed(self, layer: nn.Module):
        if not (self.gradient_checkpointing and self.training and torch.is_grad_enabled()):
            return layer
        return functools.partial(torch.utils.checkpoint.checkpoint, layer, use_reentrant=self.backend == "flex")

    @property
    def config(self) -> MPNetConfig:
        return self.mpnet.config

    @property
    def position_table(self) -> nn.Embedding:
        """MPNet's pretrained ``relative_attention_bias``, shared by every layer."""
        return self.mpnet.encoder.relative_attention_bias

    @property
    def num_buckets(self) -> int:
        return self.config.relative_attention_num_buckets

    @property
    def max_distance(self) -> int:
        return 128  # MPNetEncoder.relative_position_bucket's fixed default (not in MPNetConfig)

    @property
    def d_model(self) -> int:
        return self.config.hidden_size

    @property
    def attention_dropout(self) -> float:
        return self.mpnet.encoder.layer[0].attention.attn.dropout.p

    def bottom_modules(self) -> list[nn.Module]:
        return [self.mpnet.embeddings, *self.mpnet.encoder.layer]

    def position_ids(self, relative_position: torch.Tensor, kind: torch.Tensor, token_mask: torch.Tensor):
        """MPNet's position ids: :func:`absolute_positions` past its padding index, clamped to its table.

        Shapes: -> ``(B, L)`` int64.
        """
        padding = self.mpnet.embeddings.padding_idx
        position = absolute_positions(relative_position, kind, token_mask, self.absolute_positions)  # (B, L)
        return (position + padding + 1).clamp(max=self.config.max_position_embeddings - 1)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_mask: torch.Tensor,
        relative_position: torch.Tensor,
        kind: torch.Tensor,
    ) -> torch.Tensor:
        """Contextual token states of a batch of Levi graphs.

        Shapes: **input_ids**, **token_mask** ``(B, L)``, **relative_position**, **kind** ``(B, L, L)``
        -> ``(B, L, hidden_size)``.
        """
        bias = self.prepared_bias(token_mask, relative_position, kind, input_ids.device)
        position_ids = self.position_ids(relative_position, kind, token_mask.bool())  # (B, L)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen_layers):
            hidden = self.mpnet.embeddings(input_ids=input_ids, position_ids=position_ids)  # (B, L, d)
        return self.run_layers(hidden, list(self.mpnet.encoder.layer), bias)  # (B, L, d)
