"""Served embedders against a real HTTP server on 127.0.0.1 that serves the offline MiniLM in-process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.build import IndexSettings, build_index
from glmrag.index.embed import Embedder
from glmrag.index.extractors import Extractor, PassageExtraction
from glmrag.index.served_embed import API_KEY_ENV, REQUEST_TEXTS, EmbeddingServerError, ServedEmbeddingModel
from glmrag.llm.serve import LLMServer

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["Thomas Sudhof", "Stanford University", "a banana is a fruit", "California", "Stanford Univ."]


def served_name(server: LLMServer) -> str:
    return f"http:minilm@{server.base_url}"


def served_model(server: LLMServer, tmp_path, **kw) -> ServedEmbeddingModel:
    return ServedEmbeddingModel(served_name(server), cache_dir=tmp_path / "served", backoff=0.01, **kw)


def shards(model: ServedEmbeddingModel) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in model.cache.folder.glob("*.npz")}


@pytest.fixture
def server(embedder):
    with LLMServer(None, model_name="minilm", embedder=embedder) as s:
        yield s


class DimensionSwitch:
    """An embedder whose answers shrink to 3-d after its first request: a server that swapped its model."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder, self.calls = embedder, 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        vectors = self.embedder.encode(texts)
        return vectors if self.calls == 1 else vectors[:, :3]


def test_vectors_equal_the_in_process_model(server, embedder, tmp_path, monkeypatch):
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    texts = [f"phrase number {i}" for i in range(2 * REQUEST_TEXTS + 3)] + TEXTS  # three requests and a tail
    served = Embedder(served_name(server))
    got = served.encode(texts)
    np.testing.assert_allclose(got, embedder.encode(texts), atol=1e-5)
    assert got.dtype == np.float32 and served.dim == embedder.dim == 384
    assert server.requests == 3  # 72 texts in requests of 32; dim came from the answers, not a request
    again = Embedder(served_name(server)).encode(texts[::-1])
    assert server.requests == 3  # every vector came from the disk cache
    np.testing.assert_allclose(again, got[::-1], atol=1e-6)


class IsExtractor(Extractor):
    """One triple per passage: ``<subject> is <rest>``."""

    name = "is"

    def settings(self) -> dict:
        return {}

    def extract(self, corpus: Corpus) -> list[PassageExtraction]:
        parts = [p.text.rstrip(".").split(" is ") for p in corpus]
        return [PassageExtraction(p.id, triples=[(a, "is", b)]) for p, (a, b) in zip(corpus, parts, strict=True)]


def test_the_index_built_through_the_server_equals_the_in_process_one(server, embedder, tmp_path, monkeypatch):
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    corpus = Corpus(
        [
            Passage.make("Stanford", "Stanford University is in California."),
            Passage.make("Stanford Univ.", "Stanford Univ. is a university."),
            Passage.make("Banana", "A banana is a fruit."),
        ]
    )
    questions = [Question("q1", "Where is Stanford University?", ("California",), (corpus[0].id,))]
    name = served_name(server)
    local = build_index(corpus, questions, IsExtractor(), embedder, IndexSettings())
    remote = build_index(corpus, questions, IsExtractor(), None, IndexSettings(embed_model=name))
    assert remote.entities == local.entities and remote.relations == local.relations
    np.testing.assert_array_equal(remote.triples, local.triples)  # synonym edges included
    np.testing.assert_allclose(remote.entity_embeddings, local.entity_embeddings, atol=1e-5)
    assert remote.question_links == local.question_links
    assert remote.manifest["settings"]["embed_model"] == name


def test_transient_failures_are_retried(embedder, tmp_path):
    with LLMServer(None, embedder=embedder, fail_first=2, fail_status=503) as server:
        model = served_model(server, tmp_path)
        np.testing.assert_allclose(model.encode(TEXTS), embedder.encode(TEXTS), atol=1e-5)
    assert server.requests == 3 and model.endpoint.attempts == 3


def test_a_server_that_dies_gives_a_named_error_and_keeps_the_cache(server, embedder, tmp_path):
    model = served_model(server, tmp_path, max_retries=1, timeout=5)
    model.encode(TEXTS[:2])
    before = shards(model)
    server.close()
    with pytest.raises(EmbeddingServerError, match=r"/v1/embeddings: no answer after 2 attempts"):
        model.encode(TEXTS)
    assert shards(model) == before  # nothing lost, nothing half-written
    reopened = ServedEmbeddingModel(model.name, cache_dir=tmp_path / "served")
    np.testing.assert_allclose(reopened.encode(TEXTS[:2]), embedder.encode(TEXTS[:2]), atol=1e-5)  # from disk


def test_a_server_error_is_not_cached(embedder, tmp_path):
    with LLMServer(None, embedder=embedder, fail_first=99, fail_status=500) as server:
        model = served_model(server, tmp_path, max_retries=2)
        with pytest.raises(EmbeddingServerError, match=r"last: HTTP 500"):
            model.encode(TEXTS)
    assert server.requests == 3 and shards(model) == {}


def test_another_dimension_is_refused_and_the_cache_kept(embedder, tmp_path):
    with LLMServer(None, embedder=DimensionSwitch(embedder)) as server:
        model = served_model(server, tmp_path)
        model.encode(TEXTS[:2])
        before = shards(model)
        with pytest.raises(EmbeddingServerError, match=r"3-d vectors where http:minilm@.* gave 384-d ones"):
            model.encode(TEXTS)
        assert shards(model) == before
        fresh = served_model(server, tmp_path)  # a new process: the cache's 384 is the expected size
        with pytest.raises(EmbeddingServerError, match=r"3-d vectors .* 384-d"):
            fresh.encode(TEXTS[2:])


def test_the_key_comes_from_the_environment_and_is_never_stored(embedder, tmp_path, monkeypatch):
    key = "sk-embed-test-secret-0123"
    with LLMServer(None, embedder=embedder, api_key=key) as server:
        model = served_model(server, tmp_path)
        monkeypatch.delenv(API_KEY_ENV, raising=False)
        with pytest.raises(EmbeddingServerError, match=f"HTTP 401.*{API_KEY_ENV}"):
            model.encode(TEXTS)
        monkeypatch.setenv(API_KEY_ENV, key)
        model.encode(TEXTS)
    assert key not in repr(vars(model)) and all(key.encode() not in data for data in shards(model).values())


def test_a_name_without_an_endpoint_says_how_to_write_one():
    with pytest.raises(ValueError, match=r"http:<model>@<base_url>"):
        ServedEmbeddingModel("http:BAAI/bge-large-en-v1.5")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_eval_py_through_the_served_cli_matches_in_process_and_names_a_killed_server(tmp_path):
    """``python -m glmrag.index.serve_embeddings`` in its own process, ``eval.py`` through it; then the server is
    killed (SIGKILL) and the next job that needs a new vector stops with one line naming the endpoint."""
    port = free_port()
    model = "offline:all-MiniLM-L6-v2"
    serve = [sys.executable, "-m", "glmrag.index.serve_embeddings", "--model", model, "--port", str(port)]
    server = subprocess.Popen(serve, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        name = f"http:{model}@http://127.0.0.1:{port}/v1"
        assert line.strip().endswith(f"index.embed_model={name}"), line
        env = os.environ | {"GLMRAG_CACHE_DIR": str(tmp_path / "cache")}
        runs = {}
        for label, embed_model in (("local", model), ("served", name)):
            out = tmp_path / label
            cmd = [sys.executable, "eval.py", "data=toy", f"index.embed_model={embed_model}", f"output_dir={out}"]
            subprocess.run(cmd + ["n_boot=50"], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
            runs[label] = [json.loads(row) for row in (out / "rankings.jsonl").read_text().splitlines()]
        assert [(r["system"], r["passage_ids"]) for r in runs["served"]] == [
            (r["system"], r["passage_ids"]) for r in runs["local"]
        ]
        for a, b in zip(runs["served"], runs["local"], strict=True):
            np.testing.assert_allclose(a["passage_scores"], b["passage_scores"], atol=1e-5)
    finally:
        server.kill()
        server.wait()
    env["GLMRAG_CACHE_DIR"] = str(tmp_path / "empty_cache")  # every vector must be asked for again
    cmd = [sys.executable, "eval.py", "data=toy", f"index.embed_model={name}", f"output_dir={tmp_path / 'dead'}"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"127.0.0.1:{port}/v1/embeddings: no answer after" in done.stderr
