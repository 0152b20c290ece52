"""Serve a sentence-transformers model at an OpenAI-compatible ``/v1/embeddings`` (tests, benchmarks, local runs)::

    python -m glmrag.index.serve_embeddings --model offline:all-MiniLM-L6-v2 --port 8009
    # prints: index.embed_model=http:offline:all-MiniLM-L6-v2@http://127.0.0.1:8009/v1

The server is :class:`glmrag.llm.serve.LLMServer` with an :class:`~glmrag.index.embed.Embedder` behind it; the
client side is :mod:`glmrag.index.served_embed`.
"""

from __future__ import annotations

from glmrag.index.embed import Embedder
from glmrag.llm.serve import LLMServer, parse_server_args, serve_until_interrupted, server_parser


def main(argv: list[str] | None = None) -> None:
    args = parse_server_args(server_parser("Serve a sentence-transformers model at /v1/embeddings.", 8009), argv)
    embedder = Embedder(args.model, device=args.device)
    server = LLMServer(None, args.host, args.port, model_name=args.model, api_key=args.api_key, embedder=embedder)
    print(f"serving {args.model} ({embedder.dim}-d): index.embed_model=http:{args.model}@{server.base_url}", flush=True)
    serve_until_interrupted(server)


if __name__ == "__main__":
    main()
