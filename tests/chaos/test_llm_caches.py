"""LLM caches (OpenIE per passage, LLM descriptions, HTTP responses): a truncated, bit-flipped or older
checksum-less record is detected, warned about, redone and rewritten; the run finishes with the answers a
clean run gives, and a corrupt record is never used."""

from __future__ import annotations

import json
import logging

import pytest

from glmrag.data.types import Corpus, Passage
from glmrag.index.extractors.llm_openie import LLMOpenIEExtractor
from glmrag.io import read_cache_json
from glmrag.llm.http import HTTPLLM
from glmrag.llm.serve import LLMServer
from glmrag.retrievers.hyperaddress.llm_descriptions import LLMDescriber

pytestmark = pytest.mark.chaos

PARIS = Passage.make("Paris", "Paris is the capital of France.")
ROME = Passage.make("Rome", "Rome is the capital of Italy.")
ANSWERS = {
    "Paris": ('{"named_entities": ["Paris", "France"]}', '{"triples": [["Paris", "capital of", "France"]]}'),
    "Rome": ('{"named_entities": ["Rome", "Italy"]}', '{"triples": [["Rome", "capital of", "Italy"]]}'),
}


def openie_reply(prompt_text: str) -> str:
    """The NER or OpenIE answer for the passage a prompt asks about (the last paragraph block)."""
    title = prompt_text.rsplit("Paragraph:\n```\n", 1)[1].split("\n", 1)[0]
    ner, openie = ANSWERS[title]
    return openie if "RDF" in prompt_text else ner


def truncate(path) -> None:
    """A killed writer's half file (what a plain, non-atomic write leaves)."""
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def flip_bit(path, old: bytes) -> None:
    """One bit of the first ``old`` in the file flipped: still valid JSON, a different record."""
    blob = path.read_bytes()
    i = blob.index(old)
    path.write_bytes(blob[:i] + bytes([blob[i] ^ 1]) + blob[i + 1 :])


def openie_files(folder) -> dict[str, object]:
    """Passage title -> its OpenIE cache file."""
    return {read_cache_json(p)["ner"]["text"].split('"')[3]: p for p in folder.glob("openie-*.json")}


@pytest.mark.parametrize("damage", ["truncated", "bit_flipped"])
def test_a_damaged_openie_record_is_redone_never_used(scripted_llm, tmp_path, caplog, damage):
    corpus = Corpus([PARIS, ROME])
    clean = LLMOpenIEExtractor(scripted_llm(openie_reply), cache_dir=tmp_path).extract(corpus)
    files = openie_files(tmp_path)
    if damage == "truncated":
        truncate(files["Paris"])
    else:  # "France" -> "Grance": valid JSON whose checksum no longer matches
        flip_bit(files["Paris"], b"France")
    llm = scripted_llm(openie_reply)
    again = LLMOpenIEExtractor(llm, cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="glmrag.io"):
        assert again.extract(corpus) == clean  # the run finishes with the clean answers
    assert "checksum mismatch" in caplog.text and files["Paris"].name in caplog.text
    assert len(llm.prompts) == 2 and all("Paris" in p.rsplit("Paragraph:", 1)[1] for p in llm.prompts)
    assert again.report["passages_cached"] == 1 and again.report["passages_generated"] == 1
    assert read_cache_json(files["Paris"])["openie"]["text"] == ANSWERS["Paris"][1]  # rewritten whole


def test_older_checksum_less_records_are_redone_with_one_warning(scripted_llm, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr("glmrag.io._warned_old_format", set())
    corpus = Corpus([PARIS, ROME])
    clean = LLMOpenIEExtractor(scripted_llm(openie_reply), cache_dir=tmp_path).extract(corpus)
    for path in tmp_path.glob("openie-*.json"):  # as the extractor wrote them before checksums: plain JSON
        path.write_text(json.dumps(read_cache_json(path), indent=1))
    llm = scripted_llm(openie_reply)
    with caplog.at_level(logging.WARNING, logger="glmrag.io"):
        assert LLMOpenIEExtractor(llm, cache_dir=tmp_path).extract(corpus) == clean
    assert len(llm.prompts) == 4  # both passages asked again
    warnings = [r for r in caplog.records if "without a checksum" in r.getMessage()]
    assert len(warnings) == 1  # one warning for the folder, not one per record
    assert all(read_cache_json(p) for p in tmp_path.glob("openie-*.json"))  # rewritten with checksums


def test_a_bit_flipped_descriptions_record_is_redone(scripted_llm, tmp_path, caplog):
    def reply(prompt_text: str) -> str:
        return '{"paris": ["capital of France"]}'

    clean = LLMDescriber(scripted_llm(reply), cache_dir=tmp_path).describe(PARIS, ["paris"])
    assert clean == [("capital of France",)]
    (path,) = tmp_path.glob("descriptions-*.json")
    flip_bit(path, b"France")
    llm = scripted_llm(reply)
    with caplog.at_level(logging.WARNING, logger="glmrag.io"):
        assert LLMDescriber(llm, cache_dir=tmp_path).describe(PARIS, ["paris"]) == clean
    assert "checksum mismatch" in caplog.text and len(llm.prompts) == 1


@pytest.mark.parametrize("damage", ["truncated", "bit_flipped"])
def test_a_damaged_http_response_record_is_asked_again(scripted_llm, tmp_path, caplog, damage):
    chat = [{"role": "user", "content": "capital of France?"}]
    with LLMServer(scripted_llm(lambda _: "Paris"), model_name="m") as server:
        llm = HTTPLLM(server.base_url, "m", api_key_env=None, cache_dir=tmp_path, max_retries=0)
        (first,) = llm.generate([chat], max_new_tokens=4)
        (path,) = tmp_path.rglob("*.json")
        truncate(path) if damage == "truncated" else flip_bit(path, b"Paris")
        with caplog.at_level(logging.WARNING, logger="glmrag.io"):
            (again,) = llm.generate([chat], max_new_tokens=4)
        assert server.requests == 2  # the damaged record was not used: the request went out again
    assert again.text == first.text == "Paris" and not again.cached
    assert "checksum mismatch" in caplog.text and path.name in caplog.text
    assert read_cache_json(path)["response"]["text"] == "Paris"  # rewritten whole
