import pytest
import torch
from transformers import T5Config

from glmrag.nn.glm import T5GLMEncoder
from glmrag.nn.glm_retriever import GLMInputs, GLMRetriever, pool_nodes


def reference_pool(hidden, node_of_token, num_nodes, aggregation):
    out = torch.zeros(hidden.shape[0], num_nodes, hidden.shape[2])
    for b in range(hidden.shape[0]):
        for n in range(num_nodes):
            tokens = (node_of_token[b] == n).nonzero().flatten()
            if len(tokens) == 0:
                continue
            pick = {"mean": tokens, "first": tokens[:1], "last": tokens[-1:]}[aggregation]
            out[b, n] = hidden[b, pick].mean(0)
    return out


@pytest.mark.parametrize("aggregation", ["mean", "first", "last"])
def test_pool_nodes_matches_a_loop(aggregation):
    torch.manual_seed(0)
    hidden = torch.randn(3, 11, 5)
    # Non-contiguous copies (a linear layout repeats entities), -1 for question/padding, node 4 unused.
    node_of_token = torch.tensor(
        [
            [0, 0, 1, 2, 2, 0, -1, -1, -1, -1, -1],
            [3, 1, 1, 0, 3, 3, 2, -1, -1, -1, -1],
            [-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1],
        ]
    )
    actual = pool_nodes(hidden, node_of_token, 5, aggregation)
    torch.testing.assert_close(actual, reference_pool(hidden, node_of_token, 5, aggregation))


def tiny_retriever(**kwargs) -> GLMRetriever:
    torch.manual_seed(0)
    config = T5Config(vocab_size=50, d_model=16, d_ff=32, num_layers=2, num_heads=2, d_kv=8, dropout_rate=0.0)
    return GLMRetriever(T5GLMEncoder.from_config(config), question_dim=6, **kwargs).eval()


def inputs(question_emb: torch.Tensor) -> GLMInputs:
    L = 6
    return GLMInputs(
        input_ids=torch.tensor([[5, 6, 7, 8, 9, 10]]),
        token_mask=torch.ones(1, L, dtype=torch.bool),
        relative_position=(torch.arange(L)[None, :] - torch.arange(L)[:, None])[None],
        kind=torch.zeros(1, L, L, dtype=torch.int8),
        node_of_token=torch.tensor([[0, 1, 1, 2, -1, -1]]),
        node_mask=torch.tensor([[True, False, True]]),
        question_emb=question_emb,
    )


def test_query_interaction_makes_scores_depend_on_the_question_embedding():
    a, b = torch.randn(1, 6), torch.randn(1, 6)
    with torch.no_grad():
        on = tiny_retriever(query_interaction=True)
        assert not torch.allclose(on(inputs(a)), on(inputs(b)))
        off = tiny_retriever(query_interaction=False)
        torch.testing.assert_close(off(inputs(a)), off(inputs(b)))
    assert off(inputs(a)).shape == (1, 3)


def test_head_parameters_are_the_non_t5_parameters():
    model = tiny_retriever()
    head = {id(p) for p in model.head_parameters()}
    t5 = {id(p) for p in model.encoder.t5.parameters()}
    assert head.isdisjoint(t5) and head | t5 == {id(p) for p in model.parameters()}
