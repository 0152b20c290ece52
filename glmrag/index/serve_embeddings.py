"""Serve a sentence-transformers model at an OpenAI-compatible ``/v1/embeddings`` (tests, benchmarks, local runs)::

    python -m glmrag.index.serve_embeddings --model offline:all-MiniLM-L6-v2 --port 8009
    # prints: index.embed_model=http:offline:all-MiniLM-L6-v2@http://127.0.0.1:8009/v1

The server is :class:`glmrag.llm.serve.LLMServer` with an :class:`~glmrag.index.embed.Embedder` behind it; the
client side is :mod:`glmrag.index.served_embed`.
"""

from __future__ import annotations

import argparse
import logging

from glmrag.index.embed import Embedder
from glmrag.llm.serve import LLMServer, serve_until_interrupted, server_key


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a sentence-transformers model at /v1/embeddings.")
    parser.add_argument("--model", required=True, help="sentence-transformers name, folder, or offline:...")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8009)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--api-key-env", default=None, help="require Bearer $NAME on every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    embedder = Embedder(args.model, device=args.device)
    key = server_key(parser, args.api_key_env)
    server = LLMServer(None, args.host, args.port, model_name=args.model, api_key=key, embedder=embedder)
    print(f"serving {args.model} ({embedder.dim}-d): index.embed_model=http:{args.model}@{server.base_url}", flush=True)
    serve_until_interrupted(server)


if __name__ == "__main__":
    main()
