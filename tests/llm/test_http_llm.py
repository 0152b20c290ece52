"""The HTTP client against a real server on 127.0.0.1 that serves the tiny local model."""

import socket

import httpx
import pytest

from glmrag.io import read_cache_json
from glmrag.llm.http import HTTPLLM, LLMError
from glmrag.llm.local import LocalLLM
from glmrag.llm.serve import LLMServer

CHATS = [
    [{"role": "user", "content": "who wrote hamlet?"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "name a river in france"}],
    [{"role": "user", "content": "one two three"}],
]
KEY_ENV = "GLMRAG_TEST_LLM_KEY"
KEY = "sk-test-0123456789-secret"


@pytest.fixture
def served(tiny_lm_dir):
    """A server over its own local backend; yields (server, backend)."""
    backend = LocalLLM(str(tiny_lm_dir), batch_size=4)
    with LLMServer(backend, model_name="tiny") as server:
        yield server, backend


def client(server, tmp_path, **kw) -> HTTPLLM:
    settings = {"api_key_env": None, "backoff": 0.01, "max_retries": 3, "timeout": 30, "concurrency": 2}
    return HTTPLLM(server.base_url, "tiny", cache_dir=tmp_path / "llm_cache", **(settings | kw))


def test_text_and_counts_match_the_local_backend(served, tmp_path):
    server, backend = served
    expected = [backend.generate([c], max_new_tokens=6)[0] for c in CHATS]
    backend.usage.reset()
    with client(server, tmp_path) as llm, llm.track("dtkg", "q1"):
        gens = llm.generate(CHATS, max_new_tokens=6)
    assert [g.text for g in gens] == [e.text for e in expected]
    assert [(g.prompt_tokens, g.generated_tokens) for g in gens] == [
        (e.prompt_tokens, e.generated_tokens) for e in expected
    ]
    assert [g.finish_reason for g in gens] == [e.finish_reason for e in expected]
    usage = llm.usage.get("dtkg", "q1")
    assert (usage.calls, usage.cache_hits) == (3, 0)
    assert usage.prompt_tokens == sum(e.prompt_tokens for e in expected)
    assert usage.generated_tokens == sum(e.generated_tokens for e in expected)
    assert usage.seconds > 0
    assert server.requests == 3 and llm.attempts == 3
    assert backend.usage.total().calls == 3  # the server generated each one once


def test_plain_prompts_go_to_completions(served, tmp_path):
    server, backend = served
    (expected,) = backend.generate(["the capital of france is"], max_new_tokens=5)
    with client(server, tmp_path) as llm:
        (g,) = llm.generate(["the capital of france is"], max_new_tokens=5)
    assert (g.text, g.prompt_tokens, g.generated_tokens) == (
        expected.text,
        expected.prompt_tokens,
        expected.generated_tokens,
    )


def test_second_call_is_a_cache_hit(served, tmp_path):
    server, _ = served
    with client(server, tmp_path) as llm:
        first = llm.generate(CHATS[:2], max_new_tokens=4)
        with llm.track("hyperaddress", "q9"):
            second = llm.generate(CHATS[:2], max_new_tokens=4)
        assert server.requests == 2 and llm.attempts == 2  # no request for the second call
        assert [g.text for g in second] == [g.text for g in first]
        assert all(g.cached and g.seconds == 0 for g in second)
        usage = llm.usage.get("hyperaddress", "q9")
        assert (usage.calls, usage.cache_hits, usage.seconds) == (2, 2, 0)
        assert usage.generated_tokens == sum(g.generated_tokens for g in first)
        # Other settings are another key; sampled requests are not cached.
        llm.generate(CHATS[:1], max_new_tokens=3)
        llm.generate(CHATS[:1], max_new_tokens=4, temperature=0.7)
        llm.generate(CHATS[:1], max_new_tokens=4, temperature=0.7)
        assert server.requests == 5
    files = sorted((tmp_path / "llm_cache").rglob("*.json"))
    assert len(files) == 3
    record = read_cache_json(files[0])  # checksummed (glmrag.io)
    assert record["request"]["body"]["model"] == "tiny" and "text" in record["response"]


def test_503_twice_then_success_is_retried(served, tmp_path):
    server, backend = served
    server.fail_first = 2
    with client(server, tmp_path) as llm, llm.track("m", "q"):
        (g,) = llm.generate(CHATS[:1], max_new_tokens=4)
    assert g.text == backend.generate(CHATS[:1], max_new_tokens=4)[0].text
    assert server.requests == 3 and llm.attempts == 3
    assert llm.usage.get("m", "q").events == {"llm_retries": 2}


def test_retries_are_bounded(served, tmp_path):
    server, _ = served
    server.fail_first = 100
    with client(server, tmp_path, max_retries=2) as llm, pytest.raises(LLMError, match="3 attempts.*HTTP 503"):
        llm.generate(CHATS[:1], max_new_tokens=4)
    assert server.requests == 3


def test_connection_errors_are_retried_then_reported(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = HTTPLLM(f"http://127.0.0.1:{port}/v1", "tiny", api_key_env=None, max_retries=2, backoff=0.01)
    with pytest.raises(LLMError, match="no answer after 3 attempts.*ConnectError.*server runs"):
        llm.generate(["hi"], max_new_tokens=2)
    assert llm.attempts == 3


def test_key_comes_from_the_env_as_a_bearer_header_and_never_reaches_disk(tiny_lm_dir, tmp_path, monkeypatch):
    backend = LocalLLM(str(tiny_lm_dir))
    with LLMServer(backend, model_name="tiny", api_key=KEY) as server:
        monkeypatch.delenv(KEY_ENV, raising=False)
        with client(server, tmp_path, api_key_env=KEY_ENV) as llm:
            with pytest.raises(LLMError, match=f"HTTP 401.*{KEY_ENV}") as err:
                llm.generate(CHATS[:1], max_new_tokens=3)
            assert llm.attempts == 1  # a 401 is not retried
            assert KEY not in str(err.value)
            monkeypatch.setenv(KEY_ENV, KEY)
            (g,) = llm.generate(CHATS[:1], max_new_tokens=3)
            assert g.text == backend.generate(CHATS[:1], max_new_tokens=3)[0].text
            assert KEY not in repr(vars(llm))
        # The server checked the header itself: a raw request with the key is served, one without is not.
        url = server.base_url + "/chat/completions"
        body = {"model": "tiny", "messages": CHATS[0], "max_tokens": 2}
        assert httpx.post(url, json=body, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert httpx.post(url, json=body).status_code == 401
    files = list((tmp_path / "llm_cache").rglob("*"))
    assert any(f.is_file() for f in files)
    assert all(KEY not in f.read_text() for f in files if f.is_file())


def test_server_answers_models_and_bad_requests(served):
    server, _ = served
    assert httpx.get(server.base_url + "/models").json()["data"][0]["id"] == "tiny"
    r = httpx.post(server.base_url + "/chat/completions", json={"model": "tiny", "messages": "not a list"})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    with HTTPLLM(server.base_url.removesuffix("/v1"), "tiny", api_key_env=None) as llm:
        with pytest.raises(LLMError, match="404.*includes the version path"):
            llm.generate(["hi"], max_new_tokens=2)
