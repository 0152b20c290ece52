"""A local transformers backend: any causal LM by hub name, folder, or ``offline:`` name.

Chats are formatted with the tokenizer's chat template (a plain
``role: content`` layout when it has none); plain string prompts are completed
as they are. Prompts are sorted by length and generated in left-padded batches
of ``batch_size``; ``temperature`` 0 is greedy decoding.

The loaded ``model`` and ``tokenizer`` are public, so a method that reads
attention or hidden states (HyperAddress) runs its own forward pass on the
same weights that generate.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from glmrag.llm.base import LLM, Generation, Prompt, truncate_at_stop
from glmrag.llm.offline import DEFAULT_MODEL, ensure_checkpoint, is_offline

log = logging.getLogger(__name__)


def _fallback_chat(messages: list[dict[str, str]]) -> str:
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"


class LocalLLM(LLM):
    """Generation with a causal LM held in this process.

    Args:
        model: a hub name, a local folder, or an offline name such as ``offline:smollm2-135m-instruct``
            (dequantised once into ``cache_dir``, see :mod:`glmrag.llm.offline`).
        device: a torch device string.
        dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto`` (the checkpoint's own).
        batch_size: prompts per forward batch.
        cache_dir: where offline models keep their dequantised checkpoints (None: ``cache_root()/llm``).
        seed: the torch seed set before each sampled (``temperature`` > 0) batch; None leaves it alone.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str = "cpu",
        dtype: str = "float32",
        batch_size: int = 8,
        cache_dir: str | Path | None = None,
        seed: int | None = 0,
        usage=None,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        super().__init__(usage)
        if batch_size < 1:
            raise ValueError(f"batch_size is {batch_size}; expected at least 1")
        self.name = model
        self.batch_size = batch_size
        self.seed = seed
        start = time.perf_counter()
        path: str | Path = model
        self.built_checkpoint = False
        if is_offline(model):
            path, self.built_checkpoint = ensure_checkpoint(model, cache_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device).eval()
        self.load_seconds = time.perf_counter() - start
        """Seconds the constructor took to load (including a first dequantisation of an offline model)."""
        self.device = torch.device(device)
        if self.tokenizer.pad_token_id is None:
            if self.tokenizer.eos_token_id is None:
                raise ValueError(f"{model}: the tokenizer has neither a pad nor an eos token; give it a pad token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.pad_id = int(self.tokenizer.pad_token_id)
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = {int(e) for e in (eos if isinstance(eos, list) else [eos] if eos is not None else [])}
        log.info("loaded %s in %.2f s (%s)", model, self.load_seconds, "built" if self.built_checkpoint else "cached")

    def render(self, prompt: Prompt) -> str:
        """The text the model reads for ``prompt`` (the chat template applied, generation prompt added)."""
        if isinstance(prompt, str):
            return prompt
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return _fallback_chat(prompt)

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of ``prompt``: special tokens added to plain text, none to a chat (its template has them)."""
        ids = self.tokenizer(self.render(prompt), add_special_tokens=isinstance(prompt, str))["input_ids"]
        if not ids:
            raise ValueError(f"{self.name}: a prompt tokenised to nothing: {prompt!r}; give it some text")
        return ids

    def _batch(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-pad ``rows`` into input ids and an attention mask, both (B, L)."""
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # (B, L)
        mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, L)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _generated_length(self, new: list[int]) -> tuple[int, bool]:
        """Tokens really generated in ``new`` (finished rows are filled with pad), and whether an eos ended it."""
        for i, t in enumerate(new):
            if t in self.eos_ids:
                return i + 1, True
        n = len(new)
        while n > 0 and new[n - 1] == self.pad_id:
            n -= 1
        return n, False

    @torch.inference_mode()
    def _generate(
        self, prompts: list[Prompt], max_new_tokens: int, temperature: float, stop: list[str]
    ) -> list[Generation]:
        encoded = [self.encode(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        out: list[Generation | None] = [None] * len(prompts)
        settings: dict = {"max_new_tokens": max_new_tokens, "pad_token_id": self.pad_id}
        if temperature > 0:
            settings |= {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        else:
            settings |= {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
        if self.eos_ids:
            settings["eos_token_id"] = sorted(self.eos_ids)
        if stop:
            settings |= {"stop_strings": stop, "tokenizer": self.tokenizer}
        for b in range(0, len(order), self.batch_size):
            chunk = order[b : b + self.batch_size]
            ids, mask = self._batch([encoded[i] for i in chunk])
            if temperature > 0 and self.seed is not None:
                torch.manual_seed(self.seed)
            start = time.perf_counter()
            seqs = self.model.generate(input_ids=ids, attention_mask=mask, **settings)  # (B, L + T)
            seconds = (time.perf_counter() - start) / len(chunk)
            for row, i in enumerate(chunk):
                new = seqs[row, ids.shape[1] :].tolist()
                n, ended = self._generated_length(new)
                text = self.tokenizer.decode(new[:n], skip_special_tokens=True)
                text, stopped = truncate_at_stop(text, stop)
                out[i] = Generation(
                    text=text,
                    prompt_tokens=len(encoded[i]),
                    generated_tokens=n,
                    finish_reason="stop" if ended or stopped or n < max_new_tokens else "length",
                    seconds=seconds,
                )
        return out  # type: ignore[return-value]
