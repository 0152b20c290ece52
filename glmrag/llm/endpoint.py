"""One OpenAI-compatible endpoint: JSON POSTs with the key from the environment, retries and a bounded number in flight.

Shared by the chat/completion backend (:class:`glmrag.llm.http.HTTPLLM`) and the served embedder
(:mod:`glmrag.index.served_embed`), so both retry, time out and guard the key the same way.
"""

from __future__ import annotations

import json
import os
import threading
import time

import httpx

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
"""Answers worth asking again: rate limits and server errors."""


class EndpointError(RuntimeError):
    """A server could not answer (unreachable, error status, malformed answer); ``retries`` it took."""

    def __init__(self, message: str, retries: int = 0) -> None:
        super().__init__(message)
        self.retries = retries


def _hint(status: int, key_env: str | None) -> str:
    if status in (401, 403):
        return f"set a valid API key in the environment variable {key_env}" if key_env else "the server wants a key"
    if status == 404:
        return "check base_url (it includes the version path, e.g. http://host:port/v1) and the model name"
    return "check the request settings against the server's documentation"


class OpenAIEndpoint:
    """POSTs to ``{base_url}{path}`` of an OpenAI-compatible server.

    Args:
        base_url: the API root including the version path, e.g. ``http://127.0.0.1:8000/v1``.
        api_key_env: the environment variable that holds the key (None or unset: no key is sent).
        timeout: seconds one attempt may take in all, connecting (at most 10 of them) and reading the whole
            answer included.
        max_retries: retries of one request after the first attempt.
        backoff / max_backoff: the first wait between attempts and its cap, in seconds.
        concurrency: requests in flight at most, across all threads using this object.
        error: the exception raised when no answer comes (a subclass of :class:`EndpointError`'s signature).

    - The key is read from ``api_key_env`` at each request and sent as ``Authorization: Bearer ...``; it is
      never stored on the object or put in a message.
    - A request is retried on 429, 5xx, timeouts and connection errors, at most ``max_retries`` times, waiting
      ``backoff * 2**attempt`` seconds (capped at ``max_backoff``; a ``Retry-After`` header is honoured within
      that cap). Other answers (401, 404, ...) fail at once with what to fix.
    """

    def __init__(
        self,
        base_url: str,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        concurrency: int = 4,
        error: type[Exception] = EndpointError,
    ) -> None:
        if concurrency < 1 or max_retries < 0:
            raise ValueError(f"concurrency is {concurrency}, max_retries {max_retries}; expected >= 1 and >= 0")
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.concurrency = concurrency
        self.error = error
        self.attempts = 0
        """HTTP requests sent so far, retries included."""
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(concurrency)
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )

    def close(self) -> None:
        self._client.close()

    def post(self, path: str, body: dict) -> tuple[dict, int]:
        """The server's JSON answer to ``body`` at ``path`` and the number of retries it took."""
        url = self.base_url + path
        headers = {}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        last = ""
        for attempt in range(self.max_retries + 1):
            wait = min(self.max_backoff, self.backoff * 2**attempt)
            with self._lock:
                self.attempts += 1
            try:
                with self._slots:
                    status, text, retry_after = self._send(url, body, headers)
            except httpx.TransportError as e:  # refused, reset, timed out
                last = f"{type(e).__name__}: {e}"
            else:
                if status == 200:
                    try:
                        return json.loads(text), attempt
                    except ValueError:
                        message = f"{url} answered 200 with a body that is not JSON: {text[:200]!r}"
                        raise self.error(message, attempt) from None
                last = f"HTTP {status}: {text[:200]}"
                if status not in RETRY_STATUS:
                    raise self.error(f"{url} answered {last}; {_hint(status, self.api_key_env)}", attempt)
                try:
                    wait = min(self.max_backoff, max(wait, float(retry_after or 0)))
                except ValueError:
                    pass
            if attempt < self.max_retries:
                time.sleep(wait)
        raise self.error(
            f"{url}: no answer after {self.max_retries + 1} attempts (last: {last}); "
            "check that the server runs and base_url is right, or raise max_retries/timeout",
            self.max_retries,
        )

    def _send(self, url: str, body: dict, headers: dict) -> tuple[int, str, str | None]:
        """Status, body text and Retry-After of one attempt, answered within ``timeout`` seconds in all.

        httpx's timeout bounds each read, so a server sending a byte a second, of its headers or of its body,
        would never time out. The attempt runs in a daemon thread that the caller waits on for ``timeout``
        seconds; past that it is abandoned (the thread ends when the server or httpx's per-read timeout ends
        it) and the attempt counts as timed out. The body is also read against the deadline, so a dripping
        body closes its connection as soon as the deadline passes.
        """
        deadline = time.monotonic() + self.timeout
        outcome: list[tuple[bool, object]] = []

        def attempt() -> None:
            try:
                outcome.append((True, self._exchange(url, body, headers, deadline)))
            except BaseException as err:  # handed to the caller's thread
                outcome.append((False, err))

        worker = threading.Thread(target=attempt, name="glmrag-http-attempt", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if not outcome:
            raise httpx.ReadTimeout(f"no complete answer within timeout={self.timeout}s")
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    def _exchange(self, url: str, body: dict, headers: dict, deadline: float) -> tuple[int, str, str | None]:
        """One POST, its body read in chunks until ``deadline`` (``time.monotonic()``)."""
        with self._client.stream("POST", url, json=body, headers=headers) as r:
            chunks = []
            for chunk in r.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"no complete answer within timeout={self.timeout}s")
            return r.status_code, b"".join(chunks).decode("utf-8", errors="replace"), r.headers.get("retry-after")
