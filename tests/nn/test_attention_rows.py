import pytest
import torch

from glmrag.nn.attention_rows import capture_attention_rows

PAIRS = [(0, 3), (1, 0), (1, 2), (2, 1)]


@pytest.fixture(scope="module")
def model(tiny_llama):
    return tiny_llama(97, num_hidden_layers=3, max_position_embeddings=64)


def eager_reference(model, input_ids, attention_mask=None):
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, output_attentions=True)
    return out.logits, torch.stack([out.attentions[lay][:, h] for lay, h in PAIRS], dim=1)  # (B, 4, L, L)


@pytest.mark.parametrize("base", ["sdpa", "eager"])
def test_against_hf_eager_output_attentions(model, base):
    input_ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    logits, full = eager_reference(model, input_ids)
    rows = torch.tensor([[9, 10, 11], [0, 5, 11]])
    model.set_attn_implementation("sdpa")
    with torch.no_grad(), capture_attention_rows(model, PAIRS, rows, base=base) as captured:
        out = model(input_ids)
    assert model.config._attn_implementation == "sdpa"  # restored
    weights = captured.weights  # (B, 4, R, L)
    assert weights.shape == (2, 4, 3, 12) and captured.pairs == PAIRS
    expected = torch.gather(full, 2, rows[:, None, :, None].expand(2, 4, 3, 12))
    assert torch.allclose(weights, expected, atol=1e-5)
    assert weights[0, :, 0, 10:].abs().max() == 0.0  # row 9 sees keys 0..9 only
    assert torch.allclose(out.logits, logits, atol=1e-5)  # the model still computes the same outputs


@pytest.mark.parametrize("base", ["sdpa", "eager"])
def test_left_padded_batch(model, base):
    input_ids = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, :4] = 0  # left padding
    logits, full = eager_reference(model, input_ids, mask)
    rows = torch.tensor([7, 8, 9])  # one row set for the whole batch
    with torch.no_grad(), capture_attention_rows(model, {0: [3], 1: [0, 2], 2: [1]}, rows, base=base) as captured:
        out = model(input_ids, attention_mask=mask)
    expected = full[:, :, 7:10]  # (B, 4, 3, L)
    assert torch.allclose(captured.weights, expected, atol=1e-5)
    assert captured.weights[1, :, :, :4].abs().max() < 1e-12  # padding is never attended
    assert torch.allclose(out.logits[mask.bool()], logits[mask.bool()], atol=1e-5)


def test_rows_with_a_cache(model):
    """Rows of a second forward over a prefilled cache: keys 0..S-1, query positions offset by S - L."""
    input_ids = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(3))
    _, full = eager_reference(model, input_ids)
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        cache = model(input_ids[:, :8], use_cache=True).past_key_values
        with capture_attention_rows(model, PAIRS, torch.tensor([[1, 3]])) as captured:
            model(input_ids[:, 8:], cache=cache, use_cache=True)
    assert torch.allclose(captured.weights, full[:, :, [9, 11]], atol=1e-5)


def test_nothing_captured_outside_the_block(model):
    model.set_attn_implementation("sdpa")
    with capture_attention_rows(model, [(5, 0)], torch.tensor([0])) as captured, torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))
    with pytest.raises(RuntimeError, match="layers \\[5\\]"):
        _ = captured.weights


def test_attention_sinks_match_gpt_oss_eager():
    """GPT-OSS adds a learned sink logit per head to every softmax: rows then sum to less than 1."""
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(0)
    config = GptOssConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_local_experts=2,
        num_experts_per_tok=1,
        max_position_embeddings=64,
        sliding_window=64,
        layer_types=["full_attention", "full_attention"],
    )
    model = GptOssForCausalLM(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "sinks"):
                module.sinks.normal_()
    input_ids = torch.randint(0, 97, (1, 10), generator=torch.Generator().manual_seed(4))
    model.set_attn_implementation("eager")
    with torch.no_grad():
        full = model(input_ids, output_attentions=True).attentions
        rows = torch.tensor([[6, 9]])
        with capture_attention_rows(model, [(0, 1), (1, 3)], rows, base="eager") as captured:
            model(input_ids)
    expected = torch.stack([full[0][:, 1], full[1][:, 3]], dim=1)[:, :, [6, 9]]  # (1, 2, 2, L)
    assert torch.allclose(captured.weights, expected, atol=1e-5)
    assert captured.weights.sum(-1).max() < 1.0 - 1e-3  # the sinks took their share
