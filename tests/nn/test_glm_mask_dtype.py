"""The eager GLM's bias is built in the dtype its attention computes in, and only the one that path reads.

Under ``bf16-mixed`` (autocast over float32 weights) the forward used to build the float32 SDPA mask, which
only float32 states read, and then the dense bias in float32 as well: 2.8 GB each at T5-large's 16 heads
and 6,600 tokens. Here a tiny random T5 runs on the CPU under ``torch.autocast("cpu", dtype=torch.bfloat16)``.
"""

from __future__ import annotations

import pytest
import torch
from transformers import T5Config

import glmrag.nn.graph_attention as attention_module
from glmrag.graph.levi import GRAPH_GLOBAL, SAME_TRIPLE
from glmrag.nn.glm import T5GLMEncoder, graph_buckets

B, L = 2, 24
CONFIG = T5Config(vocab_size=50, d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8, dropout_rate=0.0)


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch of two graphs (the second with 5 padding tokens): runs of 4 tokens are one triple."""
    g = torch.Generator().manual_seed(seed)
    position = torch.arange(L)
    run = position // 4
    kind = torch.where(run[:, None] == run[None, :], SAME_TRIPLE, GRAPH_GLOBAL).to(torch.int8)  # (L, L)
    token_mask = position[None, :] < torch.tensor([[L], [L - 5]])  # (B, L)
    return {
        "input_ids": torch.randint(1, CONFIG.vocab_size, (B, L), generator=g),
        "token_mask": token_mask,
        "relative_position": (position[None, :] - position[:, None]).to(torch.int32).expand(B, L, L).clone(),
        "kind": kind.expand(B, L, L).clone(),
    }


@pytest.fixture
def built(monkeypatch) -> list:
    """The GraphAttentionBias objects the encoder's forwards build, in order."""
    biases = []
    original = T5GLMEncoder.attention_bias

    def recording(self, *args, **kwargs):
        bias = original(self, *args, **kwargs)
        biases.append(bias)
        return bias

    monkeypatch.setattr(T5GLMEncoder, "attention_bias", recording)
    return biases


def glm(attention: str = "global") -> T5GLMEncoder:
    torch.manual_seed(0)
    return T5GLMEncoder.from_config(CONFIG, attention=attention)


@pytest.mark.parametrize("attention", ["global", "local"])
def test_bf16_autocast_builds_only_a_bf16_dense_bias(built, attention):
    model = glm(attention).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**inputs())
    (bias,) = built
    assert bias._sdpa_mask is None  # the float32 SDPA mask is never built under bf16
    assert bias._dense is not None and bias._dense.dtype == torch.bfloat16
    assert bias._dense.shape == (B, CONFIG.num_heads, L, L)
    # The values: the table row of each pair's bucket, rounded to bf16 (independent of dense_bias()).
    table = torch.cat([model.position_table.weight, model.extra_bias]).detach()  # (K, H)
    bucket = graph_buckets(inputs()["relative_position"], inputs()["kind"]).long()  # (B, L, L)
    expected = table[bucket].permute(0, 3, 1, 2).to(torch.bfloat16)  # (B, H, L, L)
    assert torch.equal(bias._dense.detach(), expected)
    # The gradient still reaches the float32 table through the bf16 bias (and the global bucket's extra row,
    # whose pairs the local GLM masks).
    out.float().square().sum().backward()
    assert model.position_table.weight.grad.dtype == torch.float32
    assert model.position_table.weight.grad.abs().sum() > 0
    assert (model.extra_bias.grad[0].abs().sum() > 0) == (attention == "global")


def test_bf16_weights_build_a_bf16_dense_bias_too(built):
    model = glm().to(torch.bfloat16).eval()
    with torch.no_grad():
        model(**inputs())
    (bias,) = built
    assert bias._sdpa_mask is None and bias._dense.dtype == torch.bfloat16


def test_float32_keeps_the_float32_sdpa_mask_and_its_outputs(built, monkeypatch):
    """In float32 the forward builds the SDPA mask (no dense bias), and its output is the eager reference's:
    the same model with the SDPA path swapped for ``eager_graph_attention``."""
    model = glm("local").eval()
    with torch.no_grad():
        sdpa = model(**inputs())
    (bias,) = built
    assert bias._dense is None and bias._sdpa_mask.dtype == torch.float32
    monkeypatch.setattr(
        attention_module,
        "sdpa_graph_attention",
        lambda q, k, v, b, s: attention_module.eager_graph_attention(q, k, v, b, s),
    )
    with torch.no_grad():
        eager = model(**inputs())
    real = inputs()["token_mask"]
    torch.testing.assert_close(sdpa[real], eager[real], atol=2e-6, rtol=0)


def test_bf16_autocast_output_is_the_float32_output_to_bf16_precision():
    model = glm().eval()
    batch = inputs()
    with torch.no_grad():
        full = model(**batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = model(**batch)
    real = batch["token_mask"]
    assert mixed.dtype == torch.float32  # T5's final layer norm returns float32 states
    error = (mixed[real].float() - full[real]).abs().max() / full[real].abs().max()
    assert error < 3e-2
