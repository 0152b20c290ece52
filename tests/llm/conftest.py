"""A tiny randomly initialised causal LM on disk, and the local backend over it."""

import pytest
from transformers import AutoTokenizer

from glmrag.index.embed import resolve_model_path
from glmrag.llm.local import LocalLLM

# A chat template of the tiny model's own, so chats take the template path.
CHAT_TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory, tiny_llama):
    """A 2-layer Llama (hidden 32) with the MiniLM WordPiece tokenizer and a chat template, saved to a folder.

    Its eos is [SEP], so a greedy generation may end early or run to max_new_tokens.
    """
    folder = tmp_path_factory.mktemp("tiny_lm")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("offline:all-MiniLM-L6-v2"))
    tokenizer.chat_template = CHAT_TEMPLATE
    model = tiny_llama(
        tokenizer.vocab_size,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=tokenizer.sep_token_id,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def tiny_llm(tiny_lm_dir):
    """A fresh local backend (its own usage counter) over the tiny model; loading takes well under a second."""
    return LocalLLM(str(tiny_lm_dir), batch_size=4)
