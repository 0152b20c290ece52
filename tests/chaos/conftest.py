"""Shared pieces of the chaos suite: 127.0.0.1 servers, a malicious pickle, the Hydra configs."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[2]


class MarkerPayload:
    """Unpickling this object creates ``marker``: proof that code from a file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def write_evil_checkpoint(path: Path, marker: Path) -> Path:
    torch.save({"state_dict": {}, "hyper_parameters": {}, "payload": MarkerPayload(marker)}, path)
    return path


@pytest.fixture
def serve() -> Iterator[Callable[[type[http.server.BaseHTTPRequestHandler]], str]]:
    """Start a handler class on 127.0.0.1 (a free port); yields a function returning its base URL."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(handler: type[http.server.BaseHTTPRequestHandler]) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def file_handler(blob: bytes) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Length", str(len(blob)))
            self.end_headers()
            self.wfile.write(blob)

        def log_message(self, *args):
            pass

    return Handler


def compose_config(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def toy_inputs():
    """Two passages, one question, a counting extractor, no embeddings: an index that builds in milliseconds."""
    from glmrag.data.types import Corpus, Passage, Question
    from glmrag.index.build import IndexSettings
    from tests.index.test_store import CountingExtractor

    corpus = Corpus([Passage.make("Alpha", "Alpha text."), Passage.make("Beta", "Beta text.")])
    questions = [Question("q", "Alpha?", ("Alpha",), (corpus[0].id,))]
    return corpus, questions, CountingExtractor(), IndexSettings(embed_model=None)
