import copy

import numpy as np
import pytest
import torch
from transformers import T5Config, T5EncoderModel

from glmrag.graph.levi import encode_triples, linearise, linearise_subgraph, with_positions
from glmrag.graph.subgraph import Subgraph
from glmrag.nn.flex_attention import cpu_flex_backward
from glmrag.nn.glm import ATTENTION_NAME, T5GLMEncoder, graph_buckets

CHAIN = [
    ("barack obama", "was born in", "honolulu"),
    ("honolulu", "is located in", "hawaii"),
    ("hawaii", "is a state of", "united states of america"),
]


@pytest.fixture(scope="module")
def t5(tok):
    """A tiny random T5 encoder in float32 (the vanilla reference), over the MiniLM vocabulary."""
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=tok.vocab_size, d_model=32, d_ff=64, num_layers=3, num_heads=4, d_kv=8, dropout_rate=0.0
    )
    config._attn_implementation = "eager"
    return T5EncoderModel(config).eval()


def glm_of(t5, **kwargs) -> T5GLMEncoder:
    return T5GLMEncoder(copy.deepcopy(t5), **kwargs).eval()


def run_glm(glm: T5GLMEncoder, graphs) -> torch.Tensor:
    """:func:`encode` without gradients. Shapes: -> (B, L, d)."""
    with torch.no_grad():
        return encode(glm, graphs)


def encode(glm: T5GLMEncoder, graphs) -> torch.Tensor:
    """Pad Levi graphs into one batch and encode it. Shapes: -> (B, L, d)."""
    n = max(len(g.input_ids) for g in graphs)
    ids = torch.zeros(len(graphs), n, dtype=torch.long)
    mask = torch.zeros(len(graphs), n, dtype=torch.bool)
    position = torch.zeros(len(graphs), n, n, dtype=torch.int32)
    kind = torch.zeros(len(graphs), n, n, dtype=torch.int8)
    for row, g in enumerate(graphs):
        m = len(g.input_ids)
        ids[row, :m], mask[row, :m] = torch.from_numpy(g.input_ids), True
        position[row, :m, :m] = torch.from_numpy(g.relative_position)
        kind[row, :m, :m] = torch.from_numpy(g.kind)
    return glm(ids, mask, position, kind)


def test_against_hf_t5_on_a_chain_graph(tok, t5):
    """On a path, the GLM ("path" positions, global) is T5 reading the path written as text."""
    graph = encode_triples(CHAIN, tok, mode="path")
    text = torch.from_numpy(linearise(CHAIN, tok))[None]  # (1, L)
    assert torch.equal(torch.from_numpy(graph.input_ids)[None], text)
    with torch.no_grad():
        expected = t5(input_ids=text).last_hidden_state  # (1, L, d)
    actual = run_glm(glm_of(t5), [graph])
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)
    # In "triple" mode the pairs of different triples use the global bucket instead: not plain T5.
    triple_mode = run_glm(glm_of(t5), [encode_triples(CHAIN, tok, mode="triple")])
    assert (triple_mode - expected).abs().max() > 1e-3


def test_against_hf_t5_on_a_single_triple_in_triple_mode(tok, t5):
    triple = [("paris", "is the capital city of", "france")]
    graph = encode_triples(triple, tok, mode="triple")
    assert (graph.kind == 0).all()
    with torch.no_grad():
        expected = t5(input_ids=torch.from_numpy(linearise(triple, tok))[None]).last_hidden_state
    torch.testing.assert_close(run_glm(glm_of(t5), [graph]), expected, atol=1e-5, rtol=0)


def test_linear_layouts_with_padding_are_plain_t5(tok, t5, kg):
    """The Table 15 baseline: the linearised subgraph and question read by plain T5, batched with padding."""
    index = kg([(0, 0, 1), (1, 0, 2), (2, 1, 3)], num_entities=4)
    layouts = []
    for n, question in ((3, "who is the president"), (1, "where")):
        sub = Subgraph(np.arange(n), np.ones(n, dtype=np.int64), np.arange(4), np.array([0]), False)
        layouts.append(linearise_subgraph(index, sub, tok, question=question))
    actual = run_glm(glm_of(t5), [with_positions(g) for g in layouts])
    for row, g in enumerate(layouts):
        with torch.no_grad():
            expected = t5(input_ids=torch.from_numpy(g.input_ids)[None]).last_hidden_state[0]
        torch.testing.assert_close(actual[row, : len(g.input_ids)], expected, atol=1e-5, rtol=0)


def test_local_glm_keeps_disconnected_triples_apart_and_global_does_not(tok, t5):
    first = [("paris", "capital of", "france")]
    graph_a = encode_triples(first + [("berlin", "capital of", "germany")], tok)
    graph_b = encode_triples(first + [("rome", "capital of", "italy")], tok)
    n_first = 4  # paris | capital of | france
    for attention, same in (("local", True), ("global", False)):
        out = run_glm(glm_of(t5, attention=attention), [graph_a, graph_b])
        close = torch.allclose(out[0, :n_first], out[1, :n_first], atol=1e-6)
        assert close is same, attention


def test_question_and_global_pairs_use_the_extra_buckets(tok):
    graph = encode_triples(CHAIN, tok, question="where was obama born")
    bucket = graph_buckets(torch.from_numpy(graph.relative_position)[None], torch.from_numpy(graph.kind)[None])[0]
    kind = torch.from_numpy(graph.kind)
    assert set(bucket[kind == 1].unique().tolist()) == {32}
    assert set(bucket[kind == 2].unique().tolist()) == {33}
    assert set(bucket[kind == 3].unique().tolist()) == {34}
    assert bucket[(kind == 0) | (kind == 4)].max() < 32
    assert bucket[0, 1] == 17 and bucket[1, 0] == 1  # T5: +1 -> 16 + 1, -1 -> 1


def test_extra_buckets_start_at_the_farthest_bucket_and_are_trained(tok, t5):
    glm = glm_of(t5).train()
    table = glm.position_table.weight
    torch.testing.assert_close(glm.extra_bias.detach(), table[-1:].detach().repeat(3, 1))
    out = encode(glm, [encode_triples(CHAIN, tok, question="where was obama born")])
    out.pow(2).sum().backward()
    assert (glm.extra_bias.grad.abs().sum(dim=1) > 0).all()  # all three extra buckets are used
    assert table.grad is not None and table.grad.abs().sum() > 0


def test_from_pretrained_local_folder_registers_graph_attention(tok, t5, tmp_path):
    t5.save_pretrained(tmp_path)
    glm = T5GLMEncoder.from_pretrained(str(tmp_path)).eval()
    assert glm.config._attn_implementation == ATTENTION_NAME
    graph = encode_triples(CHAIN, tok, mode="path")
    with torch.no_grad():
        expected = t5(input_ids=torch.from_numpy(graph.input_ids)[None]).last_hidden_state
    torch.testing.assert_close(run_glm(glm, [graph]), expected, atol=1e-5, rtol=0)


def test_the_same_model_still_reads_plain_text(tok, t5):
    """With an ordinary tensor bias (T5's own forward), the registered attention is T5's eager attention."""
    glm = glm_of(t5)
    ids = torch.from_numpy(linearise(CHAIN, tok))[None]
    with torch.no_grad():
        torch.testing.assert_close(glm.t5(input_ids=ids).last_hidden_state, t5(input_ids=ids).last_hidden_state)


def test_flex_backend_matches_eager_in_inference(tok, t5):
    graphs = [encode_triples(CHAIN, tok, question="where was obama born"), encode_triples(CHAIN[:1], tok)]
    for attention in ("global", "local"):
        eager = run_glm(glm_of(t5, attention=attention), graphs)
        flex = run_glm(glm_of(t5, attention=attention, backend="flex"), graphs)
        real = len(graphs[1].input_ids)  # compare the second graph's real tokens only (padding rows differ)
        torch.testing.assert_close(flex[0], eager[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(flex[1, :real], eager[1, :real], atol=1e-5, rtol=0)


@pytest.mark.parametrize(("backend", "checkpointing"), [("eager", True), ("flex", False), ("flex", True)])
def test_gradients_match_eager_with_flex_and_checkpointing(tok, t5, backend, checkpointing):
    graphs = [encode_triples(CHAIN, tok, question="where was obama born")]

    def grads(backend: str, checkpointing: bool) -> list[torch.Tensor]:
        glm = T5GLMEncoder(copy.deepcopy(t5), backend=backend).train()
        if checkpointing:
            glm.enable_gradient_checkpointing()
        with cpu_flex_backward():
            encode(glm, graphs).pow(2).sum().backward()
        q = glm.t5.encoder.block[-1].layer[0].SelfAttention.q.weight
        return [glm.position_table.weight.grad, glm.extra_bias.grad, q.grad]

    for actual, expected in zip(grads(backend, checkpointing), grads("eager", False), strict=True):
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_flex_backend_trains_with_dropout_configured(tok):
    """FlexAttention has no attention dropout: the flex GLM drops only that one, and a training step runs."""
    config = T5Config(vocab_size=tok.vocab_size, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8)
    assert config.dropout_rate > 0
    glm = T5GLMEncoder.from_config(config, backend="flex").train()
    with cpu_flex_backward():
        encode(glm, [encode_triples(CHAIN[:1], tok)]).sum().backward()
    assert glm.t5.encoder.block[0].layer[0].SelfAttention.dropout == 0.0
    assert glm.t5.encoder.block[0].layer[0].dropout.p == config.dropout_rate


def test_sdpa_runs_without_attention_dropout_and_equals_the_eager_reference(tok, t5, monkeypatch):
    """The eager backend takes the SDPA path in eval and when training with dropout_rate 0; its outputs (every
    row of a padded batch, global and local) and its gradients equal the eager reference's. With attention
    dropout in training it stays eager."""
    import glmrag.nn.graph_attention as attention_module
    from glmrag.nn.graph_attention import eager_graph_attention, sdpa_graph_attention

    calls = {"sdpa": 0}

    def counted_sdpa(*args):
        calls["sdpa"] += 1
        return sdpa_graph_attention(*args)

    def reference(query, key, value, bias, scaling):
        return eager_graph_attention(query, key, value, bias, scaling, dropout=0.0)

    graphs = [encode_triples(CHAIN, tok, question="where was obama born"), encode_triples(CHAIN[:1], tok)]

    def outputs_and_grads(path, attention: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
        monkeypatch.setattr(attention_module, "sdpa_graph_attention", path)
        glm = T5GLMEncoder(copy.deepcopy(t5), attention=attention).train()  # dropout_rate 0: no dropout anywhere
        out = encode(glm, graphs)
        out.pow(2).sum().backward()
        q = glm.t5.encoder.block[-1].layer[0].SelfAttention.q.weight
        return out.detach(), [glm.position_table.weight.grad, glm.extra_bias.grad, q.grad]

    for attention in ("global", "local"):
        sdpa, sdpa_grads = outputs_and_grads(counted_sdpa, attention)
        assert calls["sdpa"] == t5.config.num_layers
        calls["sdpa"] = 0
        eager, eager_grads = outputs_and_grads(reference, attention)
        torch.testing.assert_close(sdpa, eager, atol=2e-6, rtol=0)
        for actual, expected in zip(sdpa_grads, eager_grads, strict=True):
            assert expected.abs().max() > 0
            torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)

    monkeypatch.setattr(attention_module, "sdpa_graph_attention", counted_sdpa)
    run_glm(glm_of(t5), graphs)  # eval
    assert calls["sdpa"] == t5.config.num_layers
    dropping = copy.deepcopy(t5)
    for module in dropping.modules():
        if hasattr(module, "dropout") and isinstance(module.dropout, float):
            module.dropout = 0.1  # T5Attention's attention-probability dropout
    dropping.config.dropout_rate = 0.1
    calls["sdpa"] = 0
    encode(T5GLMEncoder(dropping).train(), graphs)
    assert calls["sdpa"] == 0  # attention dropout in training: the eager path
