import json
import lzma
from pathlib import Path

import pytest

from glmrag.data.types import Corpus, DataFormatError, Passage
from glmrag.index.extractors import OpenIEImportExtractor

DATA = Path("/work/shared/data/musique-hipporag-100")
OPENIE = DATA / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"

A = Passage.make("Stanford University", "Stanford University is in California.")
B = Passage.make("Thomas Sudhof", "Thomas Sudhof is a professor at Stanford University.")


def _write(path: Path, docs: list[dict]) -> Path:
    data = json.dumps({"docs": docs}).encode()
    path.write_bytes(lzma.compress(data) if path.suffix == ".xz" else data)
    return path


DOCS = [
    {
        "title": A.title,
        "text": A.text,
        "extracted_entities": ["Stanford University", "California", ""],
        "extracted_triples": [["Stanford University", "located in", "California"], ["Stanford University", "is"]],
    },
    {  # only "passage" (title + newline + text), as some HippoRAG files have it
        "title": B.title,
        "passage": f"{B.title}\n{B.text}",
        "extracted_entities": ["Thomas Sudhof"],
        "extracted_triples": [
            ["Thomas Sudhof", "professor at", "Stanford University"],
            ["Thomas Sudhof", "works at", "Stanford University"],
            ["Thomas Sudhof", " ", "Stanford University"],
            ["a", "b", "c", "d"],
        ],
    },
    {"title": "Elsewhere", "text": "Not in the corpus.", "extracted_entities": [], "extracted_triples": []},
]


@pytest.mark.parametrize("name", ["openie.json", "openie.json.xz"])
def test_import_matches_docs_and_reports_bad_triples(tmp_path, name):
    extractor = OpenIEImportExtractor(_write(tmp_path / name, DOCS))
    a, b = extractor.extract(Corpus([B, A]))
    assert (a.passage_id, b.passage_id) == (B.id, A.id)  # corpus order, not file order
    assert a.triples == [
        ("Thomas Sudhof", "professor at", "Stanford University"),
        ("Thomas Sudhof", "works at", "Stanford University"),
    ]
    assert b.entities == ["Stanford University", "California"]
    assert extractor.report == {
        "docs": 3,
        "docs_not_in_corpus": 1,
        "docs_duplicate": 0,
        "triples": 3,
        "triples_bad_length": 2,
        "triples_empty_part": 1,
        "entities_empty": 1,
    }


def test_settings_follow_the_file_content(tmp_path):
    one = OpenIEImportExtractor(_write(tmp_path / "a.json", DOCS)).settings()
    same = OpenIEImportExtractor(_write(tmp_path / "b.json.xz", DOCS)).settings()
    other = OpenIEImportExtractor(_write(tmp_path / "c.json", DOCS[:2])).settings()
    assert one["sha256"] == same["sha256"] != other["sha256"]
    assert one["file"] == "a.json"


def test_missing_passage_names_file_and_title(tmp_path):
    path = _write(tmp_path / "openie.json", DOCS[:1])
    with pytest.raises(DataFormatError) as err:
        OpenIEImportExtractor(path).extract(Corpus([A, B]))
    assert str(path) in str(err.value) and "'Thomas Sudhof'" in str(err.value)


def test_malformed_file_is_a_format_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"documents": []}')
    with pytest.raises(DataFormatError, match="docs"):
        OpenIEImportExtractor(path).extract(Corpus([A]))
    with pytest.raises(FileNotFoundError, match="HippoRAG"):
        OpenIEImportExtractor(tmp_path / "absent.json").extract(Corpus([A]))


def test_real_musique_openie_file():
    corpus = Corpus(
        [Passage.make(x["title"], x["text"]) for x in json.loads((DATA / "musique_train_corpus.json").read_text())]
    )
    extractor = OpenIEImportExtractor(OPENIE)
    extractions = extractor.extract(corpus)
    assert len(extractions) == 1890
    # 17,419 triples in the file: 185 have 2, 4, 5 or 6 parts
    assert extractor.report["triples_bad_length"] == 185
    assert extractor.report["triples"] + extractor.report["triples_bad_length"] == 17419
    assert extractor.report["docs_not_in_corpus"] == 0
    first = extractions[corpus.position(Passage.make(corpus[0].title, corpus[0].text).id)]
    assert ("Journal of Mathematical Physics", "published by", "American Institute of Physics") in first.triples
