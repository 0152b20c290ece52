import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from glmrag.llm.local import LocalLLM

PROMPTS = [
    "the capital of france is",
    [{"role": "user", "content": "hello there, who wrote hamlet?"}],
    "a",
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three four five six"}],
]


def reference_greedy(folder, text: str, add_special_tokens: bool, max_new_tokens: int) -> list[int]:
    """Plain Hugging Face greedy decoding of one unpadded prompt, without our backend."""
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([tok(text, add_special_tokens=add_special_tokens)["input_ids"]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, ids.shape[1] :].tolist()


def test_batched_greedy_equals_plain_hf_greedy(tiny_llm, tiny_lm_dir):
    gens = tiny_llm.generate(PROMPTS, max_new_tokens=6)
    for prompt, g in zip(PROMPTS, gens, strict=True):
        ref = reference_greedy(tiny_lm_dir, tiny_llm.render(prompt), isinstance(prompt, str), 6)
        n = next((i + 1 for i, t in enumerate(ref) if t in tiny_llm.eos_ids), len(ref))
        assert g.text == tiny_llm.tokenizer.decode(ref[:n], skip_special_tokens=True)
        assert g.prompt_tokens == len(tiny_llm.encode(prompt))
        assert g.generated_tokens == n
        assert g.finish_reason == ("length" if n == 6 else "stop")
    usage = tiny_llm.usage.total()
    assert usage.calls == 4
    assert usage.prompt_tokens == sum(g.prompt_tokens for g in gens)
    assert usage.generated_tokens == sum(g.generated_tokens for g in gens)
    assert usage.seconds > 0


def test_chats_use_the_template_and_plain_text_is_kept(tiny_llm):
    assert tiny_llm.render(PROMPTS[1]) == "[user] hello there, who wrote hamlet?\n[assistant]"
    assert tiny_llm.render("as is") == "as is"
    tiny_llm.tokenizer.chat_template = None
    assert tiny_llm.render(PROMPTS[3]) == "system: be brief\nuser: one two three four five six\nassistant:"


def test_stop_strings_end_and_cut_the_text(tiny_llm):
    (full,) = tiny_llm.generate(["the capital of france is"], max_new_tokens=8)
    words = full.text.split()
    assert len(words) >= 3, full.text
    (cut,) = tiny_llm.generate(["the capital of france is"], max_new_tokens=8, stop=[words[2]])
    assert cut.text == full.text[: full.text.index(words[2])]
    assert cut.finish_reason == "stop"
    assert cut.generated_tokens < full.generated_tokens


def test_sampling_is_seeded(tiny_llm):
    a = tiny_llm.generate(PROMPTS[:2], max_new_tokens=5, temperature=1.0)
    b = tiny_llm.generate(PROMPTS[:2], max_new_tokens=5, temperature=1.0)
    assert [g.text for g in a] == [g.text for g in b]


def test_unknown_offline_model_names_the_known_ones():
    with pytest.raises(ValueError, match="offline:smollm2-135m-instruct"):
        LocalLLM("offline:nope")
