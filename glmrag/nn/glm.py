"""The Graph Language Model encoder: a pretrained text encoder reading a Levi graph.

GLM-RAG §3 encodes a subgraph with a GLM (Plenz & Frank 2024): T5's encoder, changed only in its attention
bias. T5's shared ``relative_attention_bias`` table is indexed by graph-aware bucket ids
(:func:`graph_buckets`): pairs inside a node or a triple, and question pairs, take T5's bucket of their
relative position (:mod:`glmrag.graph.levi`); the others take three extra buckets (GLM-RAG App. B), which
start as copies of the farthest-distance bucket. The local GLM lets only the former attend.
:class:`GraphEncoder` holds what every backbone shares (the extra buckets, the bias, the attention of
:mod:`glmrag.nn.graph_attention`); :class:`T5GLMEncoder` runs T5's own ``T5Block`` modules with a
:class:`GraphAttentionBias` as their ``position_bias``; :func:`graph_attention`, registered in transformers'
``AttentionInterface``, reads it (no copy of ``modeling_t5.py``). :mod:`glmrag.nn.glm_mpnet` is the second
backbone (MPNet, the same bias machinery).
"""

from __future__ import annotations

import abc
import copy

import torch
from torch import nn
from transformers import AttentionInterface, T5Config, T5EncoderModel
from transformers.models.t5.modeling_t5 import T5Attention, eager_attention_forward

from glmrag.graph.levi import GRAPH_GLOBAL, SAME_TRIPLE, TEXT_TO_TEXT
from glmrag.nn.attention_bias import GraphAttentionBias
from glmrag.nn.graph_attention import attend

ATTENTION_NAME = "glm_graph"
"""The name of :func:`graph_attention` in transformers' ``AttentionInterface``."""
NUM_EXTRA_BUCKETS = 3
"""GLM-RAG App. B: global GLM with FullyConnected -> three additional buckets (kinds 1, 2, 3)."""
ATTENTIONS = ("global", "local")
BACKENDS = ("eager", "flex")


def graph_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    position_bias: torch.Tensor | GraphAttentionBias | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """T5 attention with a :class:`GraphAttentionBias` (:func:`attend`), or T5's eager attention for a tensor bias.

    Shapes: **query**, **key**, **value** ``(B, H, L, D)`` -> ``(B, L, H, D)`` and None (the graph paths
    return no attention weights).
    """
    if not isinstance(position_bias, GraphAttentionBias):
        return eager_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, position_bias=position_bias
        )
    if attention_mask is not None:
        raise ValueError("a GraphAttentionBias carries its own mask; call the blocks with attention_mask=None")
    scaling = 1.0 if scaling is None else scaling
    return attend(query, key, value, position_bias, scaling, dropout, module.training), None


def register_glm_attention() -> str:
    """Register :func:`graph_attention` with transformers (idempotent); returns its name."""
    AttentionInterface.register(ATTENTION_NAME, graph_attention)
    return ATTENTION_NAME


register_glm_attention()  # at import: a process that unpickles a GLM (ddp_spawn) can run it


def graph_buckets(
    relative_position: torch.Tensor, kind: torch.Tensor, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Bucket ids of the GLM: T5's buckets for positioned pairs, ``num_buckets + kind - 1`` for the rest.

    Kinds 0 (same node or triple) and 4 (question pairs) read T5's bidirectional bucket of their
    relative position; kinds 1, 2, 3 map to the extra buckets ``num_buckets``, ``+ 1``, ``+ 2``.

    Shapes: **relative_position**, **kind** ``(B, L, L)`` -> ``(B, L, L)`` int8 (ids < 127: a fourth of
    int32's memory traffic; the Flex kernel reads int8 ids in half the time of int32 on an H200).
    """
    text = T5Attention._relative_position_bucket(
        relative_position.long(), bidirectional=True, num_buckets=num_buckets, max_distance=max_distance
    )
    positioned = (kind == SAME_TRIPLE) | (kind == TEXT_TO_TEXT)
    if num_buckets + 2 > torch.iinfo(torch.int8).max:
        raise ValueError(f"{num_buckets} T5 buckets + 3 extra do not fit int8 bucket ids")
    return torch.where(positioned, text, num_buckets + kind.long() - 1).to(torch.int8)


class GraphEncoder(nn.Module, metaclass=abc.ABCMeta):
    """What every GLM backbone shares: the three extra buckets, the :class:`GraphAttentionBias` and its kernels.

    A backbone names its shared relative-position table (:attr:`position_table`), its bucketing
    (:attr:`num_buckets`, :attr:`max_distance`: T5's bidirectional scheme for T5 and MPNet alike), its width
    (:attr:`d_model`), the dropout on attention probabilities (:attr:`attention_dropout`) and the modules of its
    bottom (:meth:`bottom_modules`: embeddings, then the layers in order).

    Args:
        attention: ``global`` (every pair attends; GLM-RAG default) or ``local`` (kind-1 pairs masked).
        backend: ``eager`` or ``flex`` (:class:`GraphAttentionBias`; without attention-probability dropout).
    """

    backbone: str = ""
    """``t5`` or ``mpnet``: the ``model.glm.backbone`` this class reads."""

    def __init__(self, attention: str = "global", backend: str = "eager") -> None:
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.attention, self.backend = attention, backend

    def init_extra_buckets(self) -> None:
        """GLM-RAG App. B: the three extra buckets start as copies of the farthest-distance bucket."""
        table = self.position_table.weight  # (num_buckets, H)
        self.extra_bias = nn.Parameter(table[-1:].detach().clone().repeat(NUM_EXTRA_BUCKETS, 1))  # (3, H)

    @property
    @abc.abstractmethod
    def position_table(self) -> nn.Embedding: ...

    @property
    @abc.abstractmethod
    def num_buckets(self) -> int: ...

    @property
    @abc.abstractmethod
    def max_distance(self) -> int: ...

    @property
    @abc.abstractmethod
    def d_model(self) -> int: ...

    @property
    @abc.abstractmethod
    def attention_dropout(self) -> float: ...

    @abc.abstractmethod
    def bottom_modules(self) -> list[nn.Module]: ...

    frozen_layers: int = 0
    """How many of the lowest layers :meth:`freeze_bottom` froze (with the token embeddings)."""

    def freeze_bottom(self, num_layers: int) -> None:
        """Freeze the token embeddings and the lowest ``num_layers`` layers (0: nothing).

        Frozen layers run without gradients and without dropout, so backpropagation stops above them (the CPU
        recipe's saving); the shared position table and the extra buckets still train through the layers above.
        """
        modules = self.bottom_modules()
        if not 0 <= num_layers < len(modules) - 1:
            raise ValueError(f"frozen_layers must be in [0, {len(modules) - 2}] for this encoder, got {num_layers}")
        for module in modules[: num_layers + 1] if num_layers else []:
            for parameter in module.parameters():
                parameter.requires_grad_(False)
        self.position_table.weight.requires_grad_(True)
        self.frozen_layers = num_layers
        self.train(self.training)

    def train(self, mode: bool = True) -> GraphEncoder:
        """Train or eval mode; the frozen bottom (:meth:`freeze_bottom`) stays in eval mode, a fixed feature
        extractor without dropout."""
        super().train(mode)
        for module in self.bottom_modules()[: self.frozen_layers + 1] if self.frozen_layers else []:
            module.eval()
        return self

    def compute_dtype(self, device: torch.device) -> torch.dtype:
        """The dtype of the attention's query states on ``device``: the autocast dtype where autocast is on for
        that device type (Lightning's ``bf16-mixed``: bf16 states over float32 weights), else the weights'."""
        if torch.is_autocast_enabled(device.type):
            return torch.get_autocast_dtype(device.type)
        return self.position_table.weight.dtype

    def attention_bias(
        self,
        token_mask: torch.Tensor,
        relative_position: torch.Tensor,
        kind: torch.Tensor,
        dtype: torch.dtype | None = None,
    ) -> GraphAttentionBias:
        """The :class:`GraphAttentionBias` every block reads; its dense bias is built in ``dtype`` (None: the
        table's).

        Shapes: **token_mask** ``(B, L)``, **relative_position**, **kind** ``(B, L, L)``.
        """
        bucket = graph_buckets(relative_position, kind, self.num_buckets, self.max_distance)  # (B, L, L)
        table = torch.cat([self.position_table.weight, self.extra_bias])  # (K, H)
        allowed = kind != GRAPH_GLOBAL if self.attention == "local" else None  # (B, L, L)
        return GraphAttentionBias(bucket, table, allowed, token_mask.bool(), self.backend, dtype)

    def prepared_bias(
        self, token_mask: torch.Tensor, relative_position: torch.Tensor, kind: torch.Tensor, device: torch.device
    ) -> GraphAttentionBias:
        """:meth:`attention_bias` in the compute dtype, with what the eager kernels read already gathered.

        Gathered here, outside any block a checkpoint would recompute, and only the one :func:`attend` reads:
        the float32 SDPA mask for float32 states without attention dropout (eval, or dropout 0), else the dense
        bias of the eager reference in the compute dtype.
        """
        dtype = self.compute_dtype(device)
        bias = self.attention_bias(token_mask, relative_position, kind, dtype)
        if self.backend == "eager":
            if dtype == torch.float32 and not (self.training and self.attention_dropout > 0):
                bias.sdpa_mask()
            else:
                bias.dense_bias()
        return bias

    def run_layers(self, hidden: torch.Tensor, layers: list[nn.Module], bias: GraphAttentionBias) -> torch.Tensor:
        """Run ``layers`` (the encoder's, bottom up) as ``layer(hidden, None, bias)[0]``, the frozen ones without
        gradients: one bias serves both, since what runs under ``no_grad`` records no use of the table.

        Shapes: **hidden** ``(B, L, d)`` -> ``(B, L, d)``.
        """
        with torch.no_grad():
            for layer in layers[: self.frozen_layers]:
                hidden = layer(hidden, None, bias)[0]  # (B, L, d)
        for layer in layers[self.frozen_layers :]:
            hidden = self.checkpointed(layer)(hidden, None, bias)[0]  # (B, L, d)
        return hidden

    def checkpointed(self, layer: nn.Module):
        """``layer`` itself; a backbone without Hugging Face's own checkpointing wraps it here."""
        return layer


class T5GLMEncoder(GraphEncoder):
    """A T5 encoder reading Levi graphs with graph-aware relative positions.

    Args:
        t5: the encoder; its ``config._attn_implementation`` is set to :data:`ATTENTION_NAME`.
        attention: ``global`` (every pair attends; GLM-RAG default) or ``local`` (kind-1 pairs masked).
        backend: ``eager`` or ``flex`` (:class:`GraphAttentionBias`; without attention-probability dropout).
    """

    backbone = "t5"

    def __init__(self, t5: T5EncoderModel, attention: str = "global", backend: str = "eager") -> None:
        super().__init__(attention, backend)
        t5.set_attn_implementation(register_glm_attention())
        if backend == "flex":
            # FlexAttention has no dropout on attention probabilities: switch that one off (T5Attention reads
            # its own ``dropout`` attribute); the residual and feed-forward dropouts stay.
            for module in t5.modules():
                if isinstance(module, T5Attention):
                    module.dropout = 0.0
        self.t5 = t5
        self.init_extra_buckets()

    @classmethod
    def from_pretrained(cls, name_or_path: str, **kwargs) -> T5GLMEncoder:
        """The pretrained encoder of ``name_or_path`` (``t5-small``/``t5-base``/``t5-large``, or a folder)."""
        return cls(T5EncoderModel.from_pretrained(name_or_path, attn_implementation=register_glm_attention()), **kwargs)

    @classmethod
    def from_config(cls, config: T5Config, **kwargs) -> T5GLMEncoder:
        """A randomly initialised encoder (tests, the offline demo); ``config`` itself is left unchanged."""
        config = copy.deepcopy(config)  # the model keeps its config object and T5GLMEncoder sets its attention
        return cls(T5EncoderModel._from_config(config, attn_implementation=register_glm_attention()), **kwargs)

    def enable_gradient_checkpointing(self) -> None:
        """Recompute each T5 block in the backward pass instead of keeping its activations.

        The flex backend uses reentrant checkpointing: with non-reentrant checkpointing the gradient of the
        bias table captured by FlexAttention's ``score_mod`` comes out wrong (measured on CPU in torch 2.13;
        ``tests/nn/test_glm.py`` checks both backends against the eager gradients without checkpointing).
        """
        kwargs = {"use_reentrant": self.backend == "flex"}
        enable = getattr(self.t5, "activation_checkpointing_enable", None)  # transformers >= 5.x
        if enable is not None:
            enable(activation_checkpointing_kwargs=kwargs)
        else:
            self.t5.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    @property
    def config(self) -> T5Config:
        return self.t5.config

    @property
    def position_table(self) -> nn.Embedding:
        """T5's pretrained ``relative_attention_bias`` (layer 0, shared by every layer)."""
        return self.t5.encoder.block[0].layer[0].SelfAttention.relative_attention_bias

    @property
    def num_buckets(self) -> int:
        return self.config.relative_attention_num_buckets

    @property
    def max_distance(self) -> int:
        return self.config.relative_attention_max_distance

    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def attention_dropout(self) -> float:
        return self.config.dropout_rate

    def bottom_modules(self) -> list[nn.Module]:
        return [self.t5.encoder.embed_tokens, *self.t5.encoder.block]

    def forward(
        self,
        input_ids: torch.Tensor,
        token_mask: torch.Tensor,
        relative_position: torch.Tensor,
        kind: torch.Tensor,
    ) -> torch.Tensor:
        """Contextual token states of a batch of Levi graphs.

        Shapes: **input_ids**, **token_mask** ``(B, L)``, **relative_position**, **kind** ``(B, L, L)``
        -> ``(B, L, d_model)``.
        """
        bias = self.prepared_bias(token_mask, relative_position, kind, input_ids.device)
        encoder = self.t5.encoder
        hidden = encoder.dropout(encoder.embed_tokens(input_ids))  # (B, L, d)
        hidden = self.run_layers(hidden, list(encoder.block), bias)  # (B, L, d)
        return encoder.dropout(encoder.final_layer_norm(hidden))
