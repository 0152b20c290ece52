"""Hostile data files: every one ends in a DataFormatError naming the file and place, or is counted."""

from __future__ import annotations

import json

import pytest

import glmrag.index.extractors.spacy_extractor as spacy_extractor
from glmrag.data.formats.common import CorpusBuilder, read_json, read_json_or_lines, read_jsonl, read_title_text_corpus
from glmrag.data.formats.contexts import load_hotpotqa
from glmrag.data.types import Corpus, DataFormatError, IngestReport, Passage

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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"title": "T", "text": "bad \\udc00 here"}]', r"line 1: has a lone UTF-16 surrogate escape '\\\\udc00'"),
        ("[" * 200_000 + "]" * 200_000, r"nests JSON deeper than the parser can read"),
    ],
    ids=["lone-surrogate", "deep-nesting"],
)
def test_the_importers_reader_makes_the_same_checks(tmp_path, text, message):
    """``.json`` question and corpus files go through read_json_or_lines (issue 22, probes 80-81)."""
    path = tmp_path / "corpus.json"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message):
        read_json_or_lines(path)
    with pytest.raises(DataFormatError, match=message):
        read_title_text_corpus(path, CorpusBuilder(IngestReport(str(path)), titles_are_ids=False))


def test_a_newline_in_a_title_cannot_make_two_passages_one():
    """("Alpha\\nBeta", "Gamma") and ("Alpha", "Beta\\nGamma") hashed to one id (issue 22, probe 82)."""
    first, second = Passage.make("Alpha\nBeta", "Gamma"), Passage.make("Alpha", "Beta\nGamma")
    assert first.id != second.id
    builder = CorpusBuilder(IngestReport("corpus.json"), titles_are_ids=False)
    ids = [builder.add(p.title, p.text, "corpus.json", f"passage {i}") for i, p in enumerate((first, second))]
    assert ids == [first.id, second.id] and "duplicate_passage" not in builder.report.counts
    assert Passage.make("Alpha", "Beta").id == "p" + __import__("hashlib").sha1(b"Alpha\nBeta").hexdigest()[:15]
