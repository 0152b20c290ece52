"""Hostile data files: every one ends in a DataFormatError naming the file and place, or is counted."""

from __future__ import annotations

import json

import pytest

import glmrag.index.extractors.spacy_extractor as spacy_extractor
from glmrag.data.formats.common import read_json, read_jsonl
from glmrag.data.formats.contexts import load_hotpotqa
from glmrag.data.types import Corpus, DataFormatError, Passage

pytestmark = pytest.mark.chaos


def _record(title: str, sentences: list[str]) -> dict:
    return {
        "_id": "q1",
        "question": "Who?",
        "answer": "A",
        "context": [[title, sentences], ["Other", ["Other text."]]],
        "supporting_facts": [["Other", 0]],
    }


@pytest.mark.parametrize("reader", [read_json, read_jsonl])
def test_lone_surrogate_is_a_data_format_error_with_its_line(tmp_path, reader):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "ok"}\n{"question": "bad \\ud800 here"}\n')
    if reader is read_json:
        path = tmp_path / "q.json"
        path.write_text('[{"question": "ok"},\n {"question": "bad \\ud800 here"}]')
    with pytest.raises(DataFormatError, match=r"line 2: has a lone UTF-16 surrogate escape"):
        reader(path)


def test_a_surrogate_pair_is_fine(tmp_path):
    path = tmp_path / "q.json"
    path.write_text('["\\ud83d\\ude00"]')
    assert read_json(path) == ["\U0001f600"]


@pytest.mark.parametrize("reader", [read_json, read_jsonl])
def test_deeply_nested_json_is_a_data_format_error(tmp_path, reader):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(DataFormatError, match="nests JSON deeper than the parser can read"):
        reader(path)


def test_a_passage_with_empty_title_and_text_is_counted(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([_record("", [""])]))
    report = load_hotpotqa(path).report
    assert report.counts.get("empty_passage") == 1
    assert "empty title and text" in report.summary()


def test_a_passage_longer_than_spacy_max_length_is_parsed_in_pieces(monkeypatch):
    """The same failure as a 1 MB passage (E088), scaled down: max_length 400, pieces of 100."""
    nlp = spacy_extractor.load_nlp()
    monkeypatch.setattr(nlp, "max_length", 400)
    monkeypatch.setattr(spacy_extractor, "MAX_PIECE", 100, raising=False)
    long_text = "Alice met Bob in Paris. " * 25  # 600 characters
    corpus = Corpus([Passage.make("Long", long_text), Passage.make("Short", "Carol lives in Rome.")])
    extractor = spacy_extractor.SpacyExtractor()
    out = extractor.extract(corpus)
    assert extractor.report["chunked_passages"] == 1
    assert "paris" in {e.lower() for e in out[0].entities} and out[1].passage_id == corpus[1].id
