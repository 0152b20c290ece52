"""The fused relational aggregation (glmrag.nn.rspmm) against the written-out sum and the materialised layer."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from glmrag.index.synthetic import power_law_index
from glmrag.nn import rspmm as rspmm_module
from glmrag.nn.gnn import GNNConfig, QueryGNN
from glmrag.nn.gnn_conv import QueryRelationalConv
from glmrag.nn.rspmm import relational_csr, rspmm

HIDDEN, TYPES = 6, 5


def multigraph(num_nodes: int, num_edges: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random edges among the first ``num_nodes - 2`` nodes (the last two are isolated), with parallel
    edges (the first three repeated) and self-loops (every fifth edge)."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(num_nodes - 2, (2, num_edges), generator=g)
    edge_index[1, ::5] = edge_index[0, ::5]  # self-loops
    edge_type = torch.randint(TYPES, (num_edges,), generator=g)
    if num_edges >= 3:
        edge_index = torch.cat([edge_index, edge_index[:, :3]], 1)
        edge_type = torch.cat([edge_type, edge_type[:3]])
    return edge_index, edge_type


def written_out(x, relation, edge_index, edge_type):
    """out_v = sum over edges (u, r, v) of x_u * rel_r, one edge at a time: glmrag's definition, PyG's direction
    (rows of edge_index[1]); GFM-RAG's C++ rspmm writes edge_index[0]'s (test_upstream_direction_is_the_transpose)."""
    out = torch.zeros_like(x)
    for (u, v), r in zip(edge_index.t().tolist(), edge_type.tolist(), strict=True):
        out[v] = out[v] + x[u] * relation[r]
    return out


def chunk_mib(edges: int, row_elements: int) -> float:
    """The budget that makes chunks of ``edges`` edges of float32 rows of ``row_elements`` values."""
    return (edges + 0.5) * row_elements * 4 / 2**20


@pytest.fixture(params=["index_add", "segment"])
def segment_sum(request, monkeypatch):
    """Both ways a chunk is summed into its rows, on the CPU (``segment`` is what a GPU runs)."""
    monkeypatch.setitem(rspmm_module.SEGMENT_SUM, "cpu", request.param)
    return request.param


@pytest.mark.parametrize("batch", [(), (1,), (3,), (2, 2)])
@pytest.mark.parametrize("chunk", [1, 7, 10_000])
def test_rspmm_and_its_gradients_equal_the_written_out_sum(batch, chunk, segment_sum):
    torch.manual_seed(len(batch) + chunk)
    edge_index, edge_type = multigraph(12, 40, seed=chunk)
    assert edge_index.shape[1] % 7 != 0  # chunks of 7 split the 43 edges unevenly
    x = torch.randn(12, *batch, HIDDEN, requires_grad=True)
    relation = torch.randn(TYPES, HIDDEN, requires_grad=True)
    rows = x[0].numel()
    out = rspmm(x, relation, edge_index, edge_type, chunk_mib=chunk_mib(chunk, rows))
    ref = written_out(x, relation, edge_index, edge_type)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert out[-2:].abs().sum() == 0  # isolated nodes receive nothing

    weight = torch.randn_like(ref)  # a loss that weighs every output differently
    grads = torch.autograd.grad((out * weight).sum(), (x, relation))
    ref_grads = torch.autograd.grad((ref * weight).sum(), (x, relation))
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_empty_edge_set_gives_zeros_and_zero_gradients():
    x = torch.randn(4, 2, HIDDEN, requires_grad=True)
    relation = torch.randn(TYPES, HIDDEN, requires_grad=True)
    out = rspmm(x, relation, torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert out.shape == x.shape and not out.any()
    out.sum().backward()
    assert not x.grad.any() and not relation.grad.any()


def test_gradcheck_in_float64(segment_sum):
    edge_index, edge_type = multigraph(6, 9, seed=3)
    x = torch.randn(6, 2, 3, dtype=torch.float64, requires_grad=True)
    relation = torch.randn(TYPES, 3, dtype=torch.float64, requires_grad=True)
    budget = (2 + 0.5) * 6 * 8 / 2**20  # chunks of 2 edges of float64 (2, 3) rows

    def fn(x, relation):
        return rspmm(x, relation, edge_index, edge_type, chunk_mib=budget)

    assert torch.autograd.gradcheck(fn, (x, relation))


def hub_graph(num_nodes: int = 40, hub_edges: int = 3000, seed: int = 0):
    """Random edges plus ``hub_edges`` into node 0, most of them of relation 0: long sums in one row and type."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(num_nodes, (2, 200), generator=g)
    hub = torch.stack([torch.randint(num_nodes, (hub_edges,), generator=g), torch.zeros(hub_edges, dtype=torch.long)])
    edge_type = torch.cat([torch.randint(TYPES, (200,), generator=g), torch.zeros(hub_edges, dtype=torch.long)])
    return torch.cat([edge_index, hub], 1), edge_type


def step(x, relation, edge_index, edge_type, weight, chunk_mib=None):
    out = rspmm(x, relation, edge_index, edge_type, chunk_mib=chunk_mib)
    return (out, *torch.autograd.grad((out * weight).sum(), (x, relation)))


def test_repeated_runs_give_the_same_bits(segment_sum):
    """Deterministic: forward and both gradients bit for bit, over 2 threads and uneven chunks."""
    edge_index, edge_type = hub_graph()
    x = torch.randn(40, 3, HIDDEN, requires_grad=True)
    relation = torch.randn(TYPES, HIDDEN, requires_grad=True)
    weight = torch.randn(40, 3, HIDDEN)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runs = [step(x, relation, edge_index, edge_type, weight, chunk_mib(97, 3 * HIDDEN)) for _ in range(3)]
    finally:
        torch.set_num_threads(threads)
    for run in runs[1:]:
        for got, first in zip(run, runs[0], strict=True):
            assert torch.equal(got, first)


def test_the_segment_sum_uses_no_index_add(monkeypatch):
    """What a GPU runs (SEGMENT_SUM's default) adds no edge into a row with index_add_, whose CUDA kernel adds
    atomically in an order that varies; sums go through segment_reduce over the row pointers."""
    monkeypatch.setitem(rspmm_module.SEGMENT_SUM, "cpu", "segment")
    calls = []
    real = torch.Tensor.index_add_
    monkeypatch.setattr(torch.Tensor, "index_add_", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    edge_index, edge_type = hub_graph()
    x = torch.randn(40, 2, HIDDEN, requires_grad=True)
    relation = torch.randn(TYPES, HIDDEN, requires_grad=True)
    out, grad_x, grad_rel = step(
        x, relation, edge_index, edge_type, torch.ones(40, 2, HIDDEN), chunk_mib(50, 2 * HIDDEN)
    )
    assert calls == []
    monkeypatch.setitem(rspmm_module.SEGMENT_SUM, "cpu", "index_add")
    ref = step(x, relation, edge_index, edge_type, torch.ones(40, 2, HIDDEN))
    assert calls  # the check above can see index_add_
    for got, want in zip((out, grad_x, grad_rel), ref, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)  # other chunks: other rounding


def test_bf16_inputs_are_summed_in_float32(segment_sum):
    """Under bf16 autocast the sums of a 3,000-edge hub row and of relation 0's gradient (3,000 terms) keep
    float32 precision: the only error is rounding each final value to bf16 (bf16's unit roundoff, 2^-8 of the
    value, plus float32's own, far smaller). Summed in bf16, increments below the running sum's ulp are lost: the
    same check fails by far (the hub row's sum is about 3,000 x 0.25, where a bf16 ulp is 4)."""
    edge_index, edge_type = hub_graph()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(40, 2, HIDDEN, generator=g).bfloat16().requires_grad_()  # positive: the hub sum grows
    relation = torch.rand(TYPES, HIDDEN, generator=g).bfloat16().requires_grad_()
    weight = torch.rand(40, 2, HIDDEN, generator=g).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grad_x, grad_rel = step(x, relation, edge_index, edge_type, weight)
    assert out.dtype == grad_x.dtype == grad_rel.dtype == torch.bfloat16
    wide = [t.detach().double().requires_grad_() for t in (x, relation)]
    ref = step(*wide, edge_index, edge_type, weight.double())
    for got, want in zip((out, grad_x, grad_rel), ref, strict=True):
        assert ((got.double() - want).abs() <= (2**-8 + 2**-16) * want.abs()).all()


def test_upstream_direction_is_the_transpose():
    """GFM-RAG's C++ rspmm (gfmrag/models/ultra/rspmm/source/rspmm.cpp, rspmm_forward_out_cpu) takes
    row = edge_index[0], col = edge_index[1] and computes out[row] += relation[type] * input[col]: messages run
    from edge_index[1] to edge_index[0]. Written out here from that source; glmrag computes it on the flipped
    edges (benchmarks/bench_rspmm_peer.py checks the same against the built extension)."""
    edge_index, edge_type = multigraph(10, 30, seed=5)
    x, relation = torch.randn(10, HIDDEN), torch.randn(TYPES, HIDDEN)
    upstream = torch.zeros(10, HIDDEN)
    for (row, col), r in zip(edge_index.t().tolist(), edge_type.tolist(), strict=True):
        upstream[row] += relation[r] * x[col]
    torch.testing.assert_close(rspmm(x, relation, edge_index.flip(0), edge_type), upstream)
    assert not torch.allclose(rspmm(x, relation, edge_index, edge_type), upstream)


def test_csr_is_cached_per_edge_tensor_and_rebuilt_after_an_in_place_edit():
    edge_index, edge_type = multigraph(8, 20, seed=4)
    csr = relational_csr(edge_index, edge_type, 8)
    assert relational_csr(edge_index, edge_type, 8) is csr
    assert relational_csr(edge_index.clone(), edge_type, 8) is not csr
    assert torch.equal(csr.by_target.scatter, edge_index[1].sort().values)
    assert torch.equal(csr.by_source.scatter, edge_index[0].sort().values)
    x, relation = torch.randn(8, HIDDEN), torch.randn(TYPES, HIDDEN)
    edge_type.add_(1).remainder_(TYPES)  # edited in place: the cached order is stale
    assert relational_csr(edge_index, edge_type, 8) is not csr
    out = rspmm(x, relation, edge_index, edge_type)
    torch.testing.assert_close(out, written_out(x, relation, edge_index, edge_type), atol=1e-5, rtol=1e-5)


def conv_pair(hidden: int, seed: int) -> tuple[QueryRelationalConv, QueryRelationalConv]:
    torch.manual_seed(seed)
    fused = QueryRelationalConv(hidden, aggregation="fused")
    with torch.no_grad():  # a non-trivial LayerNorm affine
        fused.norm.weight.uniform_(0.5, 1.5)
        fused.norm.bias.uniform_(-0.5, 0.5)
    materialized = QueryRelationalConv(hidden, aggregation="materialized")
    materialized.load_state_dict(fused.state_dict())
    return fused, materialized


def conv_outputs_and_grads(conv, inputs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    leaves = {k: v.clone().requires_grad_() for k, v in inputs.items() if v.is_floating_point()}
    out = conv(**{**inputs, **leaves})
    weight = torch.linspace(-1, 1, out.numel()).view_as(out)
    conv.zero_grad()
    (out * weight).sum().backward()
    grads = {k: v.grad for k, v in leaves.items()} | {n: p.grad for n, p in conv.named_parameters()}
    return out.detach(), grads


@pytest.mark.parametrize("batch", [1, 2, 3, 4])
@pytest.mark.parametrize("chunk", [1, 7, 10_000])
@pytest.mark.parametrize("num_edges", [0, 50])
def test_fused_layer_equals_materialized_layer(monkeypatch, batch, chunk, num_edges):
    """Outputs and gradients wrt x, boundary, relation features and every parameter, within 1e-5."""
    hidden = 8
    monkeypatch.setitem(rspmm_module.CHUNK_MIB, "cpu", chunk_mib(chunk, batch * hidden))
    fused, materialized = conv_pair(hidden, seed=batch)
    edge_index, edge_type = multigraph(15, num_edges, seed=batch)
    g = torch.Generator().manual_seed(chunk)
    inputs = {
        "x": torch.randn(15, batch, hidden, generator=g),
        "boundary": torch.randn(15, batch, hidden, generator=g),
        "edge_index": edge_index,
        "edge_type": edge_type,
        "relation": torch.randn(TYPES, hidden, generator=g),
    }
    out, grads = conv_outputs_and_grads(fused, inputs)
    ref, ref_grads = conv_outputs_and_grads(materialized, inputs)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert grads.keys() == ref_grads.keys() and {"x", "boundary", "relation", "linear.weight"} <= grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-5, rtol=1e-5, msg=name)
    if num_edges:
        assert grads["relation"].abs().sum() > 0  # the relations get a gradient through the messages


def test_aggregation_is_validated_and_passed_to_every_layer():
    with pytest.raises(ValueError, match="aggregation"):
        GNNConfig(aggregation="sparse")
    with pytest.raises(ValueError, match="aggregation"):
        QueryRelationalConv(8, aggregation="sparse")
    assert {c.aggregation for c in QueryGNN(GNNConfig(num_layers=3)).convs} == {"fused"}
    model = QueryGNN(GNNConfig(num_layers=3, aggregation="materialized"))
    assert {c.aggregation for c in model.convs} == {"materialized"}


@pytest.mark.parametrize("aggregation", ["fused", "materialized"])
def test_relation_mlp_runs_once_per_layer_per_batch(make_graph, aggregation):
    """The per-layer relation MLPs do not depend on the question: one call per layer per batch, none in backward
    (the fused layer recomputes only LayerNorm + ReLU)."""
    graph = make_graph(power_law_index(50, 200, 7, 10, seed=1))
    model = QueryGNN(
        GNNConfig(hidden_channels=8, num_layers=3, question_dim=16, relation_dim=16, aggregation=aggregation)
    )
    calls = []
    for conv in model.convs:  # wrap forward itself: checkpoint recomputation skips module hooks

        def counted(features, mlp=conv.relation_proj, forward=conv.relation_proj.forward):
            calls.append(mlp)
            return forward(features)

        conv.relation_proj.forward = counted
    weight = torch.zeros(3, graph.num_nodes)
    weight[:, 0] = 1.0
    model(graph, torch.randn(3, 16), weight).sum().backward()
    assert calls == [conv.relation_proj for conv in model.convs]


def counted_mlps(model: QueryGNN) -> list:
    """Record every call of the shared relation MLP and of each layer's (wrapping forward itself)."""
    calls = []
    for mlp in [model.relation_proj, *(conv.relation_proj for conv in model.convs)]:

        def counted(features, mlp=mlp, forward=mlp.forward):
            calls.append(mlp)
            return forward(features)

        mlp.forward = counted
    return calls


def test_relation_mlps_run_once_per_graph_at_evaluation(make_graph):
    """Without autograd the relation MLPs' outputs are fixed per graph and weights: computed at the first
    forward, reused after (same scores as computed afresh), computed again after a weight or feature change,
    never reused with autograd on."""
    graph = make_graph(power_law_index(50, 200, 7, 10, seed=1))
    model = QueryGNN(GNNConfig(hidden_channels=8, num_layers=3, question_dim=16, relation_dim=16))
    fresh = copy.deepcopy(model)
    calls = counted_mlps(model)
    weight = torch.zeros(2, graph.num_nodes)
    weight[:, 0] = 1.0
    query = torch.randn(2, 16)
    with torch.no_grad():
        first = model(graph, query, weight)
        assert len(calls) == 4
        again = model(graph, query * 2, weight)
        assert len(calls) == 4  # nothing recomputed for another question
        torch.testing.assert_close(again, fresh(graph, query * 2, weight), atol=0, rtol=0)
        model.convs[1].relation_proj[0].weight.add_(0.1)  # an optimizer step changes the weights in place
        model(graph, query, weight)
        assert len(calls) == 5  # the changed layer only
        graph.relation_features.mul_(2)  # new features: every projection again
        model(graph, query, weight)
        assert len(calls) == 9
    model(graph, query, weight).sum().backward()  # training: always afresh, gradients reach every MLP
    assert len(calls) == 13 and all(p.grad is not None for p in model.convs[0].relation_proj.parameters())
    copy.deepcopy(model)  # a cache never stops a model from being copied
    assert first.shape == (2, graph.num_nodes)


def test_whole_retriever_scores_equal_on_a_musique_sized_kg(make_graph):
    """The musique100 KG's size (benchmarks/RESULTS.md: 19,102 entities, 52,358 directed edges), synthetic.

    Scores within 1e-5 in float32; gradients in float64 (in float32, sums over 19k entities in another
    order differ by up to 1e-4 of the largest weight gradient)."""
    index = power_law_index(19_102, 26_179, 2_000, 1_000, seed=0)
    graph = make_graph(index)
    config = GNNConfig(hidden_channels=8, num_layers=3, question_dim=16, relation_dim=16)
    torch.manual_seed(0)
    fused = QueryGNN(config)
    materialized = QueryGNN(GNNConfig(**{**config.__dict__, "aggregation": "materialized"}))
    materialized.load_state_dict(fused.state_dict())
    query = torch.randn(2, 16)
    weight = torch.zeros(2, index.num_entities)
    weight[0, [3, 70]], weight[1, 11] = 0.5, 1.0
    with torch.no_grad():
        logits, ref = fused(graph, query, weight), materialized(graph, query, weight)
    assert graph.num_edges == 52_358 and logits.std() > 0
    torch.testing.assert_close(logits, ref, atol=1e-5, rtol=1e-5)

    graph.relation_features = graph.relation_features.double()

    def scores_and_grads(model):
        logits = model.double()(graph, query.double(), weight.double())
        logits.logsumexp(-1).sum().backward()
        return logits.detach(), {n: p.grad for n, p in model.named_parameters()}

    logits, grads = scores_and_grads(fused)
    ref, ref_grads = scores_and_grads(materialized)
    torch.testing.assert_close(logits, ref, atol=1e-10, rtol=0)
    assert grads["convs.2.relation_proj.0.weight"].abs().sum() > 0
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-10, rtol=1e-10, msg=name)


def test_a_kernel_that_fails_to_compile_falls_back_to_eager(monkeypatch):
    """No C++ compiler, say: the first compile error warns once, and every later call runs eagerly."""
    from torch._dynamo.exc import BackendCompilerFailed

    def broken_compile(body, **_):
        def run(*args):
            raise BackendCompilerFailed(body, RuntimeError("no C++ compiler"), None)

        return run

    monkeypatch.setattr(rspmm_module, "_COMPILED", {})
    monkeypatch.setattr(torch, "compile", broken_compile)
    edge_index, edge_type = multigraph(10, 30, seed=5)
    x, relation = torch.randn(10, 2, HIDDEN), torch.randn(TYPES, HIDDEN)
    with pytest.warns(UserWarning, match="no C\\+\\+ compiler"):
        out = rspmm(x, relation, edge_index, edge_type, kernel="compiled", chunk_mib=chunk_mib(7, 2 * HIDDEN))
    torch.testing.assert_close(out, written_out(x, relation, edge_index, edge_type), atol=1e-5, rtol=1e-5)
    assert rspmm_module._COMPILED == {rspmm_module._aggregate_chunk: None}
    with pytest.raises(ValueError, match="kernel"):
        rspmm(x, relation, edge_index, edge_type, kernel="triton")


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 3])
def test_compiled_kernel_equals_the_written_out_sum(batch):
    """torch.compile of the chunk bodies (inductor C++ on the CPU): outputs and both gradients."""
    edge_index, edge_type = multigraph(12, 40, seed=batch)
    x = torch.randn(12, batch, HIDDEN, requires_grad=True)
    relation = torch.randn(TYPES, HIDDEN, requires_grad=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="torch.compile of")  # a fallback to eager would pass unnoticed
        out = rspmm(x, relation, edge_index, edge_type, kernel="compiled", chunk_mib=chunk_mib(7, batch * HIDDEN))
        ref = written_out(x, relation, edge_index, edge_type)
        weight = torch.randn_like(ref)
        grads = torch.autograd.grad((out * weight).sum(), (x, relation))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, torch.autograd.grad((ref * weight).sum(), (x, relation)), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_inference_mode_graphs_are_cached_too():
    with torch.inference_mode():
        edge_index, edge_type = multigraph(8, 20, seed=6)
        x, relation = torch.randn(8, 2, HIDDEN), torch.randn(TYPES, HIDDEN)
        out = rspmm(x, relation, edge_index, edge_type)
        assert relational_csr(edge_index, edge_type, 8) is relational_csr(edge_index, edge_type, 8)
    torch.testing.assert_close(out, written_out(x, relation, edge_index, edge_type), atol=1e-5, rtol=1e-5)


def test_a_checkpoint_from_before_the_setting_loads_with_the_fused_default(tmp_path, make_graph):
    import lightning

    from glmrag.models.checkpointing import HPARAMS_LAYOUT, HPARAMS_LAYOUT_KEY
    from glmrag.models.gnn_module import GNNRetrieverModule

    torch.manual_seed(0)
    gnn = {"hidden_channels": 8, "num_layers": 2, "question_dim": 16, "relation_dim": 16, "node_dim": 16}
    module = GNNRetrieverModule(gnn=gnn)
    hparams = dict(module.hparams)
    ckpt = {"state_dict": module.state_dict(), "pytorch-lightning_version": lightning.__version__}
    ckpt[HPARAMS_LAYOUT_KEY] = HPARAMS_LAYOUT
    torch.save(ckpt | {"hyper_parameters": hparams | {"gnn": gnn}}, tmp_path / "old.ckpt")  # no aggregation key
    mat = hparams | {"gnn": gnn | {"aggregation": "materialized"}}
    torch.save(ckpt | {"hyper_parameters": mat}, tmp_path / "mat.ckpt")
    old = GNNRetrieverModule.load_from_checkpoint(tmp_path / "old.ckpt")
    mat = GNNRetrieverModule.load_from_checkpoint(tmp_path / "mat.ckpt")
    assert {c.aggregation for c in old.gnn.convs} == {"fused"}
    assert {c.aggregation for c in mat.gnn.convs} == {"materialized"}
    graph = make_graph(power_law_index(40, 120, 5, 10, seed=2))
    weight = torch.zeros(2, graph.num_nodes)
    weight[0, 1], weight[1, 2] = 1.0, 1.0
    query = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(old(graph, query, weight), mat(graph, query, weight), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("aggregation", ["fused", "materialized"])
def test_model_aggregation_config_key_reaches_every_layer(train_config, aggregation):
    import hydra

    cfg = train_config((f"model.gnn.aggregation={aggregation}", "output_dir=x"))
    with torch.device("meta"):
        module = hydra.utils.instantiate(cfg.model)
    assert {c.aggregation for c in module.gnn.convs} == {aggregation}
    assert train_config(("output_dir=x",)).model.gnn.aggregation == "fused"


def saved_bytes(conv, num_edges: int) -> int:
    """Bytes of the storages autograd keeps for one layer's backward on 20 nodes and ``num_edges`` edges."""
    edge_index, edge_type = multigraph(20, num_edges, seed=7)
    x = torch.randn(20, 2, 8, requires_grad=True)
    storages = {}

    def keep(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        conv(x, x.detach(), edge_index, edge_type, torch.randn(TYPES, 8))
    return sum(storages.values())


def test_fused_layer_keeps_nothing_that_grows_with_the_edges():
    """What the switch is for: backward memory O(N B H) fused, O(E B H) materialised."""
    fused, materialized = conv_pair(8, seed=0)
    assert saved_bytes(fused, 4000) == saved_bytes(fused, 40)
    grown = saved_bytes(materialized, 4000) - saved_bytes(materialized, 40)
    assert grown >= (4000 - 40) * (2 + 1) * 8 * 4  # the (E, B, H) gathered states and the (E, H) relations
