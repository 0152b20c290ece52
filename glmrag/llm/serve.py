"""A small OpenAI-compatible server in front of an :class:`~glmrag.llm.base.LLM` and/or an embedder (tests, local runs).

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (``prompt`` a string or a list),
``POST /v1/embeddings`` (``input`` a string or a list), ``GET /v1/models``; one request is computed at a time,
on 127.0.0.1 unless told otherwise::

    python -m glmrag.llm.serve --model offline:smollm2-135m-instruct --port 8008
    # then: HTTPLLM(base_url="http://127.0.0.1:8008/v1", model="offline:smollm2-135m-instruct")
    python -m glmrag.index.serve_embeddings --model offline:all-MiniLM-L6-v2 --port 8009   # embeddings only
    # then: index.embed_model=http:offline:all-MiniLM-L6-v2@http://127.0.0.1:8009/v1

``api_key`` (``--api-key-env NAME``) answers 401 without ``Authorization: Bearer <key>``; ``fail_first``
answers the first N requests with ``fail_status`` (503), to test a client's retries.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import numpy as np

from glmrag.llm.base import LLM, Generation

log = logging.getLogger(__name__)


class _BadRequest(ValueError):
    pass


def _settings(body: dict) -> dict[str, Any]:
    if body.get("n", 1) != 1:
        raise _BadRequest("only n=1 is served")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
    stop = body.get("stop")
    return {
        "max_new_tokens": int(max_tokens),
        "temperature": float(body.get("temperature") or 0.0),
        "stop": [stop] if isinstance(stop, str) else stop,
    }


def _usage(gens: list[Generation]) -> dict[str, int]:
    p, c = sum(g.prompt_tokens for g in gens), sum(g.generated_tokens for g in gens)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


class TextEncoder(Protocol):
    """What ``/v1/embeddings`` serves: :class:`glmrag.index.embed.Embedder` or anything with its ``encode``."""

    def encode(self, texts: list[str]) -> np.ndarray: ...


class LLMServer:
    """An OpenAI-compatible endpoint on ``host:port`` (port 0: a free one), served from a daemon thread.

    ``backend`` answers the completion routes and ``embedder`` the embeddings route (None: that route answers
    404). ``requests`` counts the POSTs received (failed ones included). Use as a context manager, or call
    :meth:`close`.
    """

    def __init__(
        self,
        backend: LLM | None,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str | None = None,
        api_key: str | None = None,
        fail_first: int = 0,
        fail_status: int = 503,
        embedder: TextEncoder | None = None,
    ) -> None:
        if backend is None and embedder is None:
            raise ValueError("LLMServer needs an LLM backend, an embedder, or both")
        self.backend = backend
        self.embedder = embedder
        self.model_name = model_name or (backend.name if backend is not None else "embedder")
        self.api_key = api_key
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.requests = 0
        self._count_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._generate_lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="llm-server", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        """Stop serving and drop the open connections, as a server that dies does (a client's kept-alive
        connection would otherwise go on being answered)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._count_lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> LLMServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _embeddings(self, body: dict) -> dict:
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise _BadRequest("'input' must be a string or a list of strings")
        if body.get("encoding_format", "float") != "float":
            raise _BadRequest("only encoding_format 'float' is served")
        with self._generate_lock:
            vectors = np.asarray(self.embedder.encode(texts), dtype=np.float32)  # (N, d)
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        tokens = sum(len(t.split()) for t in texts)  # whitespace words: this server has no tokenizer to count with
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": self.model_name, "usage": usage}

    def _answer(self, path: str, body: dict) -> dict:
        if path == "/v1/embeddings":
            return self._embeddings(body)
        settings = _settings(body)
        now, rid = int(time.time()), uuid.uuid4().hex[:12]
        if path == "/v1/chat/completions":
            if not isinstance(body.get("messages"), list):
                raise _BadRequest("'messages' must be a list of {role, content}")
            with self._generate_lock:
                (g,) = self.backend.generate([body["messages"]], **settings)
            message = {"role": "assistant", "content": g.text}
            choices = [{"index": 0, "message": message, "finish_reason": g.finish_reason}]
            head = {"id": f"chatcmpl-{rid}", "object": "chat.completion", "created": now, "model": self.model_name}
            return head | {"choices": choices, "usage": _usage([g])}
        prompts = body.get("prompt")
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise _BadRequest("'prompt' must be a string or a list of strings")
        with self._generate_lock:
            gens = self.backend.generate(prompts, **settings)
        choices = [{"index": i, "text": g.text, "finish_reason": g.finish_reason} for i, g in enumerate(gens)]
        head = {"id": f"cmpl-{rid}", "object": "text_completion", "created": now, "model": self.model_name}
        return head | {"choices": choices, "usage": _usage(gens)}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with server._count_lock:
                    server._connections.add(self.connection)

            def finish(self) -> None:
                with server._count_lock:
                    server._connections.discard(self.connection)
                super().finish()

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str) -> None:
                self._send(status, {"error": {"message": message, "type": "invalid_request_error", "code": status}})

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})
                else:
                    self._error(404, f"no route {self.path}")

            def do_POST(self) -> None:  # noqa: N802
                body_bytes = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server._count_lock:
                    server.requests += 1
                    failing = server.requests <= server.fail_first
                if failing:
                    return self._error(server.fail_status, "injected failure (fail_first)")
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    return self._error(401, "missing or wrong API key")
                path = self.path.rstrip("/")
                embedding = path == "/v1/embeddings"
                served = server.embedder is not None if embedding else server.backend is not None
                if path not in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings") or not served:
                    return self._error(404, f"no route {self.path}")
                try:
                    self._send(200, server._answer(path, json.loads(body_bytes or b"{}")))
                except (_BadRequest, ValueError, TypeError) as e:
                    self._error(400, str(e))

            def log_message(self, fmt: str, *args) -> None:  # quiet; never logs headers (the key)
                log.debug("%s %s", self.address_string(), fmt % args)

        return Handler


def main(argv: list[str] | None = None) -> None:
    from glmrag.llm.local import LocalLLM
    from glmrag.llm.offline import DEFAULT_MODEL

    parser = server_parser("Serve a local causal LM with an OpenAI-compatible API.", 8008, DEFAULT_MODEL)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parse_server_args(parser, argv)
    backend = LocalLLM(args.model, device=args.device, batch_size=args.batch_size)
    server = LLMServer(backend, args.host, args.port, api_key=args.api_key)
    print(f"serving {args.model} at {server.base_url} (loaded in {backend.load_seconds:.1f} s)", flush=True)
    serve_until_interrupted(server)


def server_parser(description: str, port: int, model: str | None = None) -> argparse.ArgumentParser:
    """The options every local server takes: ``--model`` (required when ``model`` is None), ``--host``, ``--port``,
    ``--device`` and ``--api-key-env``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default=model, required=model is None, help="hub name, folder, or offline:...")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--api-key-env", default=None, help="require Bearer $NAME on every request")
    return parser


def parse_server_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed options with ``api_key``: the key ``--api-key-env NAME`` requires (None: no key; an empty
    variable is refused); logging set up for the server's lines."""
    args = parser.parse_args(argv)
    args.api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not args.api_key:
        parser.error(f"--api-key-env {args.api_key_env}: that environment variable is empty")
    logging.basicConfig(level=logging.INFO)
    return args


def serve_until_interrupted(server: LLMServer) -> None:
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.close()


if __name__ == "__main__":
    main()
