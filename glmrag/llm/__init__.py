"""Language-model access for the whole package: one interface, two backends, counted usage.

- :class:`LLM` (``base``): ``generate(prompts, max_new_tokens, temperature, stop) -> list[Generation]``,
  ``usage`` (a :class:`UsageCounter`) and ``track(method, question_id)``.
- :class:`~glmrag.llm.local.LocalLLM`: any causal LM in this process; ``offline:smollm2-135m-instruct`` by default.
- :class:`HTTPLLM`: any OpenAI-compatible server, with retries, a concurrency limit and an on-disk cache.
- :class:`~glmrag.llm.serve.LLMServer`: serves any backend over the same API (tests, local runs).
- :func:`parse_json`, :func:`parse_choice`: read structured answers; never raise, count their fallbacks.

Methods receive an ``LLM`` (built from ``configs/llm/*.yaml``); they never build one themselves.
"""

from glmrag.llm.base import LLM, Generation, Message, Prompt, Usage, UsageCounter
from glmrag.llm.http import HTTPLLM, LLMError
from glmrag.llm.parse import parse_choice, parse_json

__all__ = [
    "HTTPLLM",
    "LLM",
    "Generation",
    "LLMError",
    "LLMServer",
    "LocalLLM",
    "Message",
    "Prompt",
    "Usage",
    "UsageCounter",
    "parse_choice",
    "parse_json",
]


def __getattr__(name: str):
    # torch and transformers load only when the local backend is asked for.
    if name == "LocalLLM":
        from glmrag.llm.local import LocalLLM

        return LocalLLM
    if name == "LLMServer":
        from glmrag.llm.serve import LLMServer

        return LLMServer
    raise AttributeError(f"module 'glmrag.llm' has no attribute {name!r}")
