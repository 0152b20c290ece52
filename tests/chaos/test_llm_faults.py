"""LLM faults (error status, dripping server, malformed usage) cost the failed questions, never the run."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from glmrag.data.types import Question
from glmrag.eval.llm_failures import retrieve_guarded
from glmrag.jobs.evaluate import run_eval
from glmrag.llm.base import LLMBudgetExceeded, LLMError
from glmrag.llm.http import HTTPLLM
from glmrag.retrievers.base import Ranking
from tests.chaos.conftest import compose_config

pytestmark = pytest.mark.chaos

ANSWER = {"choices": [{"message": {"content": "Answer: yes"}, "finish_reason": "stop"}]}


def handler(status: int = 200, body: dict | None = None, drip_seconds: float = 0.0):
    payload = json.dumps(body if body is not None else ANSWER).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            for byte in payload:  # bounded: len(payload) writes
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                if drip_seconds:
                    time.sleep(drip_seconds)

        def log_message(self, *args):
            pass

    return Handler


def _qa_overrides(url: str, out, **extra) -> list[str]:
    base = [
        "data=toy",
        "retriever=[dense]",
        "qa=true",
        "qa_baselines=[]",
        "n_boot=10",
        f"output_dir={out}",
        "llm@reader.llm=http",
        f"reader.llm.base_url={url}/v1",
        "reader.llm.max_retries=1",
        "reader.llm.backoff=0.01",
        "reader.llm.use_cache=false",
    ]
    return base + [f"{k}={v}" for k, v in extra.items()]


def test_a_500_answering_reader_fails_the_question_not_the_run(cache, tmp_path, serve):
    url = serve(handler(status=500, body={"error": "boom"}))
    out = tmp_path / "out"
    result = run_eval(compose_config("eval", _qa_overrides(url, out, max_llm_failures="null")))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["llm_failures"]["dense"] == {"failed_questions": [], "llm_failures": 1, "llm_retries": 1}
    assert result.overall["dense"]["em"].mean == 0.0
    row = json.loads((out / "per_question.jsonl").read_text().splitlines()[0])
    assert row["prediction"] == "" and row["recall@2"] is not None  # the retrieval of that question is kept


def test_max_llm_failures_stops_the_run_after_writing_its_outputs(cache, tmp_path, serve):
    url = serve(handler(status=500, body={"error": "boom"}))
    out = tmp_path / "out"
    with pytest.raises(LLMBudgetExceeded, match="max_llm_failures=0"):
        run_eval(compose_config("eval", _qa_overrides(url, out, max_llm_failures=0)))
    assert json.loads((out / "metrics.json").read_text())["settings"]["llm_failures"]["dense"]["llm_failures"] == 1


def test_a_dripping_server_is_cut_at_the_total_timeout(serve):
    """The whole answer would arrive after ~6 s, one byte every 0.1 s; each read alone is quick."""
    url = serve(handler(drip_seconds=0.1))
    llm = HTTPLLM(url + "/v1", "m", api_key_env=None, timeout=1.0, max_retries=0, use_cache=False)
    with pytest.raises(LLMError, match="within timeout=1.0s"):
        llm.complete("hi")
    assert llm.usage.total().events == {"llm_failures": 1}


def header_drip_handler(byte_seconds: float, headers_sent: threading.Event):
    """Sends its status line and headers one byte every ``byte_seconds`` (bounded: ~80 bytes), then sets
    ``headers_sent`` and sends the answer."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            payload = json.dumps(ANSWER).encode()
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            try:
                for byte in head.encode():
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(byte_seconds)
                headers_sent.set()
                self.wfile.write(payload)
            except OSError:  # the client gave up: fine
                pass

        def log_message(self, *args):
            pass

    return Handler


def test_a_server_dripping_its_headers_is_cut_at_the_total_timeout(serve):
    """Headers would take ~8 s at one byte per 0.1 s; every read alone is quick, the attempt is not."""
    headers_sent = threading.Event()
    url = serve(header_drip_handler(0.1, headers_sent))
    llm = HTTPLLM(url + "/v1", "m", api_key_env=None, timeout=1.0, max_retries=0, use_cache=False)
    with pytest.raises(LLMError, match="within timeout=1.0s"):
        llm.complete("hi")
    assert not headers_sent.is_set()  # released at the deadline, not once the server got through its headers
    assert llm.usage.total().events == {"llm_failures": 1}


def test_non_numeric_usage_is_counted_and_the_answer_kept(serve):
    body = ANSWER | {"usage": {"prompt_tokens": "many", "completion_tokens": 3}}
    llm = HTTPLLM(serve(handler(body=body)) + "/v1", "m", api_key_env=None, max_retries=0, use_cache=False)
    (gen,) = llm.generate([[{"role": "user", "content": "hi"}]])
    assert (gen.text, gen.prompt_tokens, gen.generated_tokens) == ("Answer: yes", 0, 3)
    assert llm.usage.total().events == {"usage_unreadable": 1}


class FlakyRetriever:
    """Raises LLMError whenever question ``bad`` is in the batch; ranks the one passage otherwise."""

    name = "flaky"

    def retrieve(self, questions, index, corpus, top_k=10):
        if any(q.id == "bad" for q in questions):
            raise LLMError("server down")
        return [Ranking(q.id, ["p0"], [1.0]) for q in questions]


def test_a_failing_retriever_question_is_ranked_empty_and_the_others_kept():
    questions = [Question(id=i, question="?", answers=("a",), supporting=("p0",)) for i in ("ok1", "bad", "ok2")]
    rankings, failed = retrieve_guarded("flaky", FlakyRetriever(), questions, None, None, 5)
    assert failed == ["bad"]
    assert [(r.question_id, r.passage_ids) for r in rankings] == [("ok1", ["p0"]), ("bad", []), ("ok2", ["p0"])]
