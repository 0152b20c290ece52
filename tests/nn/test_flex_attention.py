"""FlexAttention graph bias against the eager reference, on tiny CPU inputs (and on CUDA when present)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from glmrag.nn.attention_bias import GraphAttentionBias
from glmrag.nn.flex_attention import cpu_flex_backward, flex_graph_attention, graph_block_mask
from glmrag.nn.glm import graph_attention
from glmrag.nn.graph_attention import eager_graph_attention, sdpa_graph_attention

B, H, L, D, K = 2, 3, 40, 8, 35
LENGTHS = (40, 33)  # the second sequence has 7 padding tokens


def make_case(local: bool, seed: int = 0, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """Random q, k, v (B, H, L, D) and a GraphAttentionBias; local: random ``allowed`` with the diagonal on."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, L, D, generator=g) for _ in range(3))
    table = torch.randn(K, H, generator=g)
    bucket = torch.randint(0, K, (B, L, L), generator=g, dtype=torch.int32)
    key_mask = torch.arange(L)[None, :] < torch.tensor(LENGTHS)[:, None]  # (B, L)
    allowed = None
    if local:
        allowed = torch.rand(B, L, L, generator=g) < 0.3
        allowed |= torch.eye(L, dtype=torch.bool)
        allowed &= key_mask[:, :, None]  # padding query rows allow nothing: fully masked
    tensors = [x.to(device=device, dtype=dtype) for x in (q, k, v, table)]
    bias = GraphAttentionBias(
        bucket=bucket.to(device),
        table=tensors[3],
        allowed=None if allowed is None else allowed.to(device),
        key_mask=key_mask.to(device),
    )
    return tensors[0], tensors[1], tensors[2], bias


def rows_with_a_key(bias: GraphAttentionBias) -> torch.Tensor:
    """(B, L) bool: query rows with at least one allowed key."""
    keep = bias.key_mask[:, None, :].expand(B, L, L)
    if bias.allowed is not None:
        keep = keep & bias.allowed
    return keep.any(-1)


@pytest.mark.parametrize("local", [False, True], ids=["global", "local"])
def test_forward_matches_eager(local: bool) -> None:
    q, k, v, bias = make_case(local)
    eager = eager_graph_attention(q, k, v, bias, scaling=1.0)
    flex = flex_graph_attention(q, k, v, bias, scaling=1.0)
    assert flex.shape == eager.shape == (B, L, H, D)
    rows = rows_with_a_key(bias)
    assert rows.sum() == (B * L if not local else sum(LENGTHS))
    torch.testing.assert_close(flex[rows], eager[rows], atol=1e-5, rtol=1e-5)
    # The bias matters: without the table the output moves.
    bias.table = torch.zeros_like(bias.table)
    assert (flex_graph_attention(q, k, v, bias, scaling=1.0) - flex)[rows].abs().max() > 1e-2


def test_scaling_is_applied() -> None:
    q, k, v, bias = make_case(local=True, seed=1)
    eager = eager_graph_attention(q, k, v, bias, scaling=0.125)
    flex = flex_graph_attention(q, k, v, bias, scaling=0.125)
    rows = rows_with_a_key(bias)
    torch.testing.assert_close(flex[rows], eager[rows], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("local", [False, True], ids=["global", "local"])
def test_gradients_match_eager(local: bool) -> None:
    """Gradients w.r.t. q, k, v and the bias table (captured by the score_mod closure) equal eager's."""
    q, k, v, bias = make_case(local, seed=2)
    weight = torch.randn(B, L, H, D, generator=torch.Generator().manual_seed(3))
    weight = weight * rows_with_a_key(bias)[:, :, None, None]  # the caller ignores rows with no key

    def grads(attention) -> list[torch.Tensor]:
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, bias.table)]
        case = GraphAttentionBias(bucket=bias.bucket, table=leaves[3], allowed=bias.allowed, key_mask=bias.key_mask)
        (attention(*leaves[:3], case, 1.0) * weight).sum().backward()
        return [x.grad for x in leaves]

    with cpu_flex_backward():
        flex = grads(flex_graph_attention)
    eager = grads(eager_graph_attention)
    for name, f, e in zip(("query", "key", "value", "table"), flex, eager, strict=True):
        assert e.abs().max() > 0, name
        torch.testing.assert_close(f, e, atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def test_table_gradient_without_lifting_the_cpu_guard() -> None:
    """Only the table trains (q, k, v frozen): torch's public CPU path differentiates the captured table as is."""
    q, k, v, bias = make_case(local=True, seed=4)
    rows = rows_with_a_key(bias)[:, :, None, None]
    grads = []
    for attention in (flex_graph_attention, eager_graph_attention):
        table = bias.table.detach().clone().requires_grad_()
        case = GraphAttentionBias(bucket=bias.bucket, table=table, allowed=bias.allowed, key_mask=bias.key_mask)
        (attention(q, k, v, case, 1.0) * rows).square().sum().backward()
        grads.append(table.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-4, rtol=1e-4)


def test_fully_masked_rows_are_finite() -> None:
    """Padding query rows with no allowed key: flex writes 0, eager the mean of v; no NaN in outputs or gradients."""
    q, k, v, bias = make_case(local=True, seed=5)
    empty = ~rows_with_a_key(bias)  # (B, L)
    assert empty.sum() == L - LENGTHS[1]
    outputs = {}
    for name, attention in (("flex", flex_graph_attention), ("eager", eager_graph_attention)):
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        with cpu_flex_backward():
            out = attention(*leaves, bias, 1.0)
            out.sum().backward()
        assert torch.isfinite(out).all(), name
        assert all(torch.isfinite(x.grad).all() for x in leaves), name
        outputs[name] = out.detach()
    torch.testing.assert_close(outputs["flex"][empty], torch.zeros_like(outputs["flex"][empty]))
    uniform = v[1].mean(dim=1)  # (H, D): the mean over all L keys, padding included
    torch.testing.assert_close(outputs["eager"][1, LENGTHS[1] :], uniform.expand(L - LENGTHS[1], H, D))


def test_dropout_is_refused_with_the_fix() -> None:
    q, k, v, bias = make_case(local=False)
    flex = dataclasses.replace(bias, backend="flex")
    with pytest.raises(ValueError, match="dropout_rate: 0"):
        graph_attention(torch.nn.Module(), q, k, v, None, scaling=1.0, dropout=0.1, position_bias=flex)
    dispatched = graph_attention(torch.nn.Module(), q, k, v, None, scaling=1.0, dropout=0.0, position_bias=flex)[0]
    torch.testing.assert_close(dispatched, flex_graph_attention(q, k, v, flex, scaling=1.0))


def test_cpu_backward_error_names_the_eager_backend() -> None:
    q, k, v, bias = make_case(local=False)
    with pytest.raises(RuntimeError, match="backend 'eager'"):
        flex_graph_attention(q.requires_grad_(), k, v, bias, scaling=1.0)


def test_block_mask_skips_disallowed_blocks_and_is_reused() -> None:
    """Two 128-token graph regions that never attend to each other: half the blocks are skipped."""
    n = 256
    region = torch.arange(n) // 128
    allowed = (region[:, None] == region[None, :])[None]  # (1, n, n)
    bias = GraphAttentionBias(
        bucket=torch.zeros(1, n, n, dtype=torch.int32),
        table=torch.zeros(K, H),
        allowed=allowed,
        key_mask=torch.ones(1, n, dtype=torch.bool),
    )
    block_mask = graph_block_mask(bias, n)
    assert block_mask.sparsity() == pytest.approx(50.0)
    assert torch.equal(block_mask.to_dense()[0, 0], torch.eye(2, dtype=torch.int32))
    from glmrag.nn.flex_attention import _cached_block_mask

    first = _cached_block_mask(bias, n)
    assert _cached_block_mask(bias, n) is first
    bias.allowed = allowed.clone()  # a new tensor: a new mask
    assert _cached_block_mask(bias, n) is not first


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("local", [False, True], ids=["global", "local"])
def test_compiled_flex_matches_eager_on_cuda(local: bool) -> None:
    """The compiled CUDA kernel: outputs and all gradients (table included) equal eager in float32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    q, k, v, bias = make_case(local, seed=6, device="cuda")
    rows = rows_with_a_key(bias)[:, :, None, None]
    results = []
    for attention in (flex_graph_attention, eager_graph_attention):
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, bias.table)]
        case = GraphAttentionBias(bucket=bias.bucket, table=leaves[3], allowed=bias.allowed, key_mask=bias.key_mask)
        out = attention(*leaves[:3], case, 1.0) * rows
        out.square().sum().backward()
        results.append([out.detach(), *(x.grad for x in leaves)])
    for f, e in zip(*results, strict=True):
        torch.testing.assert_close(f, e, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("local", [False, True], ids=["global", "local"])
@pytest.mark.parametrize("scaling", [1.0, 0.125])
def test_sdpa_equals_eager_in_outputs_and_every_gradient(local: bool, scaling: float) -> None:
    """The SDPA path (float mask) against the eager reference on every row, padding rows with no key included:
    outputs within 2e-6 and the gradients of q, k, v and the bias table."""
    q, k, v, bias = make_case(local, seed=7)
    weight = torch.randn(B, L, H, D, generator=torch.Generator().manual_seed(8))  # every row, none ignored

    def run(attention) -> tuple[torch.Tensor, list[torch.Tensor]]:
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, bias.table)]
        case = GraphAttentionBias(bucket=bias.bucket, table=leaves[3], allowed=bias.allowed, key_mask=bias.key_mask)
        out = attention(*leaves[:3], case, scaling)
        (out * weight).sum().backward()
        return out.detach(), [x.grad for x in leaves]

    sdpa_out, sdpa_grads = run(sdpa_graph_attention)
    eager_out, eager_grads = run(lambda *a: eager_graph_attention(*a, dropout=0.0))
    assert sdpa_out.shape == (B, L, H, D) and sdpa_out.is_contiguous()
    torch.testing.assert_close(sdpa_out, eager_out, atol=2e-6, rtol=0)
    for name, s, e in zip(("query", "key", "value", "table"), sdpa_grads, eager_grads, strict=True):
        assert e.abs().max() > 0, name
        torch.testing.assert_close(s, e, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@pytest.fixture
def cuda_kernel(monkeypatch):
    """Installs the kernel ``flex_graph_attention`` compiles on CUDA (``_flex_kernel(cuda)``, as the module builds
    it) with a dynamo backend that runs on the CPU, for the CPU inputs of these tests."""
    import glmrag.nn.flex_attention as flex_module

    real_compile = torch.compile

    def install(backend) -> None:
        torch._dynamo.reset()
        monkeypatch.setattr(flex_module, "_COMPILED_FLEX", None)
        monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: real_compile(fn, backend=backend, **kwargs))
        kernel = flex_module._flex_kernel(torch.device("cuda"))
        monkeypatch.setattr(torch, "compile", real_compile)
        monkeypatch.setattr(flex_module, "_flex_kernel", lambda device: kernel)

    yield install
    torch._dynamo.reset()


def test_the_cuda_kernel_traces_as_one_graph_and_matches_eager(cuda_kernel) -> None:
    """Compiled with ``fullgraph=True`` the kernel traces without a graph break and runs compiled (no fallback)."""
    cuda_kernel("eager")
    q, k, v, bias = make_case(local=True, seed=9)
    with torch.no_grad():
        flex = flex_graph_attention(q, k, v, bias, scaling=0.5)
    rows = rows_with_a_key(bias)
    torch.testing.assert_close(flex[rows], eager_graph_attention(q, k, v, bias, 0.5)[rows], atol=1e-5, rtol=1e-5)


def _failing_backend(graph, example_inputs):
    raise RuntimeError("planted compile failure")


@pytest.mark.parametrize("failure", ["dynamo disabled", "compile error suppressed", "recompile limit"])
def test_a_cuda_kernel_that_cannot_run_compiled_fails_loudly(cuda_kernel, failure: str) -> None:
    """Where dynamo would hand the kernel back to Python (and FlexAttention take its unfused path, seen only as
    slowness), the call raises, naming why."""
    from torch._dynamo.exc import BackendCompilerFailed, FailOnRecompileLimitHit

    from glmrag.nn.flex_attention import FlexFallbackError

    q, k, v, bias = make_case(local=False, seed=10)
    config = torch._dynamo.config
    if failure == "dynamo disabled":
        cuda_kernel("eager")
        with config.patch(disable=True), torch.no_grad(), pytest.raises(FlexFallbackError, match="disable=True"):
            flex_graph_attention(q, k, v, bias, scaling=1.0)
    elif failure == "compile error suppressed":
        cuda_kernel(_failing_backend)
        with config.patch(suppress_errors=True), torch.no_grad():
            with pytest.raises((FlexFallbackError, BackendCompilerFailed), match="planted compile failure|uncompiled"):
                flex_graph_attention(q, k, v, bias, scaling=1.0)
    else:
        cuda_kernel("eager")
        with config.patch(recompile_limit=1), torch.no_grad():
            flex_graph_attention(q, k, v, bias, scaling=1.0)
            with pytest.raises((FlexFallbackError, FailOnRecompileLimitHit)):
                flex_graph_attention(q, k, v, bias, scaling=0.5)  # a new constant: a second graph
