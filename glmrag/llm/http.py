"""An OpenAI-compatible HTTP backend: OpenAI, vLLM, llama.cpp server, or :mod:`glmrag.llm.serve`.

Chats go to ``{base_url}/chat/completions``, plain prompts to ``{base_url}/completions``; ``base_url``
includes the version path, as in the OpenAI client (``http://127.0.0.1:8008/v1``). :class:`HTTPLLM`
reads the API key from the environment at each request and never stores it; it retries transient
failures with backoff, bounds the requests in flight, and caches greedy responses on disk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from glmrag.io import cache_root, load_cached_json, write_cache_json
from glmrag.llm.base import LLM, LLM_RETRIES, Generation, LLMError, Prompt, UsageCounter, truncate_at_stop
from glmrag.llm.endpoint import OpenAIEndpoint

log = logging.getLogger(__name__)


def _token_count(usage: dict, key: str) -> int | None:
    """``usage[key]`` as a count (0 when absent); None when the server sent something that is no count."""
    value = usage.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        count = int(value)
    except ValueError:
        return None
    return count if count >= 0 else None


USAGE_UNREADABLE = "usage_unreadable"
"""Event: a server's ``usage`` token count was not a count (counted as 0 tokens; the answer is kept)."""


class HTTPLLM(LLM):
    """Generation through an OpenAI-compatible server.

    Args:
        base_url: the API root including the version path, e.g. ``https://api.openai.com/v1``.
        model: the model name the server knows.
        api_key_env: the environment variable that holds the key (None or unset: no key is sent).
        timeout: seconds one attempt may take in all, connecting (at most 10 of them) and reading the whole
            answer included.
        max_retries: retries of one request after the first attempt.
        backoff / max_backoff: the first wait between attempts and its cap, in seconds.
        concurrency: requests in flight at most.
        cache_dir: the response cache (None: ``cache_root()/llm_cache``).
        use_cache: False: neither read nor write the cache.
        cache_sampled: also cache requests with temperature > 0.
        max_tokens_field: ``max_tokens`` (most servers) or ``max_completion_tokens`` (newer OpenAI models).
        extra_body: more request fields (``top_p``, ``seed``, ...), sent with every request and part of the cache key.

    - The key, retries, timeouts and requests in flight are :class:`~glmrag.llm.endpoint.OpenAIEndpoint`'s: the
      key is read from ``api_key_env`` at each request and never stored, written to the cache, or put in a
      message; 429, 5xx, timeouts and connection errors are retried with backoff; at most ``concurrency``
      requests are in flight.
    - Responses are cached under ``cache_dir``, one checksummed JSON file per request
      (:func:`glmrag.io.write_cache_json`: atomic, so concurrent runs need no lock; a truncated, edited or
      older checksum-less file is a miss, warned, asked again and rewritten), keyed by a hash of
      (base_url, endpoint, model, messages or prompt, settings). Only greedy requests (temperature 0) are
      cached unless ``cache_sampled``. A cache hit counts as a call and a ``cache_hit`` and costs 0 seconds.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        concurrency: int = 4,
        cache_dir: str | Path | None = None,
        use_cache: bool = True,
        cache_sampled: bool = False,
        max_tokens_field: str = "max_tokens",
        extra_body: dict[str, Any] | None = None,
        usage: UsageCounter | None = None,
    ) -> None:
        super().__init__(usage)
        self.endpoint = OpenAIEndpoint(
            base_url, api_key_env, timeout, max_retries, backoff, max_backoff, concurrency, error=LLMError
        )
        self.base_url = self.endpoint.base_url
        self.model = model
        self.name = f"{model}@{self.base_url}"
        self.concurrency = concurrency
        self.cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "llm_cache"
        self.use_cache = use_cache
        self.cache_sampled = cache_sampled
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})

    @property
    def attempts(self) -> int:
        """HTTP requests sent so far, retries included (cache hits send none)."""
        return self.endpoint.attempts

    def close(self) -> None:
        self.endpoint.close()

    def __enter__(self) -> HTTPLLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- requests -------------------------------------------------------------------------------------

    def request(self, prompt: Prompt, max_new_tokens: int, temperature: float, stop: list[str]) -> tuple[str, dict]:
        """The endpoint and JSON body for one prompt (no key in it: that goes in a header)."""
        body: dict[str, Any] = {"model": self.model}
        if isinstance(prompt, str):
            endpoint, body["prompt"] = "/completions", prompt
        else:
            endpoint, body["messages"] = "/chat/completions", prompt
        body |= {self.max_tokens_field: max_new_tokens, "temperature": temperature}
        if stop:
            body["stop"] = stop
        return endpoint, body | self.extra_body

    def cache_path(self, endpoint: str, body: dict) -> Path:
        """The cache file of a request: a SHA-256 of base_url, endpoint and body (model, prompt, settings)."""
        key = json.dumps({"base_url": self.base_url, "endpoint": endpoint, "body": body}, sort_keys=True)
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.cache_dir / digest[:2] / f"{digest}.json"

    @staticmethod
    def _read(answer: dict, endpoint: str, url: str) -> dict:
        """Text, token counts and finish reason out of an OpenAI-style answer."""
        try:
            choice = answer["choices"][0]
            text = choice["message"].get("content") if endpoint == "/chat/completions" else choice.get("text")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise LLMError(f"{url} answered without choices[0]: {json.dumps(answer)[:300]}") from None
        usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
        return {
            "text": text if isinstance(text, str) else "",
            "prompt_tokens": _token_count(usage, "prompt_tokens"),
            "generated_tokens": _token_count(usage, "completion_tokens"),
            "finish_reason": "length" if choice.get("finish_reason") == "length" else "stop",
        }

    def _one(self, endpoint: str, body: dict, stop: list[str], path: Path | None) -> tuple[Generation, int, int]:
        start = time.perf_counter()
        answer, retries = self.endpoint.post(endpoint, body)
        fields = self._read(answer, endpoint, self.base_url + endpoint)
        unreadable = [k for k in ("prompt_tokens", "generated_tokens") if fields[k] is None]
        for k in unreadable:
            fields[k] = 0
        fields["text"], _ = truncate_at_stop(fields["text"], stop)  # servers that ignore stop
        if path is not None:
            record = {"request": {"base_url": self.base_url, "endpoint": endpoint, "body": body}, "response": fields}
            write_cache_json(path, record)
        return Generation(**fields, seconds=time.perf_counter() - start), retries, len(unreadable)

    def _cached(self, path: Path) -> Generation | None:
        """The cached answer at ``path``; None when missing or not intact (warned): asked again and rewritten."""
        record = load_cached_json(path, f"LLM response cache {self.cache_dir}")
        if record is None:
            return None
        try:
            return Generation(**record["response"], seconds=0.0, cached=True)
        except (KeyError, TypeError) as err:  # a record of another shape (hand-edited; its checksum updated)
            log.warning("%s: not an LLM response record (%r); the request is sent again", path, err)
            return None

    def _generate(
        self, prompts: list[Prompt], max_new_tokens: int, temperature: float, stop: list[str]
    ) -> list[Generation]:
        out: list[Generation | None] = [None] * len(prompts)
        todo: list[tuple[int, str, dict, Path | None]] = []
        cacheable = self.use_cache and (temperature == 0 or self.cache_sampled)
        for i, p in enumerate(prompts):
            endpoint, body = self.request(p, max_new_tokens, temperature, stop)
            path = self.cache_path(endpoint, body) if cacheable else None
            out[i] = self._cached(path) if path is not None else None
            if out[i] is None:
                todo.append((i, endpoint, body, path))
        if todo:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo))) as pool:
                futures = [(i, pool.submit(self._one, endpoint, body, stop, path)) for i, endpoint, body, path in todo]
                retries = unreadable = 0
                for i, f in futures:
                    out[i], n, bad = f.result()
                    retries, unreadable = retries + n, unreadable + bad
            if retries:
                self.usage.count(LLM_RETRIES, retries)
            if unreadable:
                self.usage.count(USAGE_UNREADABLE, unreadable)
        return out  # type: ignore[return-value]
