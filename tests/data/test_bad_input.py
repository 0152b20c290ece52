"""Each kind of malformed input fails with a message naming the file and the record.

Recoverable problems are counted in the report instead; non-ASCII text is no problem.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmrag.data.importers import (
    DataFileNotFoundError,
    load_2wiki,
    load_gfmrag,
    load_hipporag,
    load_hotpotqa,
    load_linearrag,
    load_musique,
)
from glmrag.data.types import DataFormatError


def write(folder: Path, name: str, obj: object) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def para(title: str, text: str, supporting: bool) -> dict:
    return {"title": title, "paragraph_text": text, "is_supporting": supporting}


def musique_q(qid: str = "2hop__1_2", **overrides) -> dict:
    q = {
        "id": qid,
        "question": "Who founded the publisher of Dune?",
        "answer": "Chilton",
        "paragraphs": [para("Dune", "Dune was published by Chilton.", True), para("Other", "Noise.", False)],
    }
    return q | overrides


def hotpot_q(qid: str = "h1", **overrides) -> dict:
    q = {
        "_id": qid,
        "question": "Were A and B born in the same year?",
        "answer": "no",
        "context": [["A", ["A was born in 1900."]], ["B", ["B was born in 1901.", " B died."]]],
        "supporting_facts": [["A", 0], ["B", 0]],
    }
    return q | overrides


def message(call) -> str:
    with pytest.raises(DataFormatError) as e:
        call()
    return str(e.value)


def test_file_not_found(tmp_path):
    missing = tmp_path / "musique_train.json"
    with pytest.raises(FileNotFoundError) as e:  # also a DataFormatError
        load_musique(missing)
    assert isinstance(e.value, DataFileNotFoundError)
    assert str(e.value) == f"{missing}: file: does not exist; expected an existing file (check the path)"


def test_a_folder_given_as_a_file_is_named_a_folder(tmp_path):
    """Probe (issue 50): a folder given as data.questions was reported as 'does not exist'."""
    with pytest.raises(FileNotFoundError) as e:
        load_musique(tmp_path)
    assert str(e.value) == f"{tmp_path}: file: is a folder; expected a file: the one inside it that holds the records"


def test_invalid_json_names_line_and_column(tmp_path):
    path = tmp_path / "musique_train.json"
    path.write_text('[\n  {"id": "2hop__1_2",\n   "question": "x" "answer": "y"}\n]')
    msg = message(lambda: load_musique(path))
    assert msg.startswith(f"{path}: line 3, column 20: is not valid JSON (Expecting ',' delimiter)")


def test_invalid_json_lines_names_the_line(tmp_path):
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(hotpot_q()) + "\n{not json}\n")
    msg = message(lambda: load_2wiki(path))
    assert msg.startswith(f"{path}: line 2, column 2: is not valid JSON")


def test_empty_file(tmp_path):
    path = tmp_path / "q.json"
    path.write_text("  \n")
    assert message(lambda: load_musique(path)) == f"{path}: whole file: is empty; expected a JSON document"


def test_non_utf8_bytes_say_the_encoding_expected(tmp_path):
    path = tmp_path / "corpus.json"
    path.write_bytes('[{"title": "Pál Gábor", "text": "x"}]'.encode("latin-1"))
    msg = message(lambda: load_hipporag(write(tmp_path, "q.json", [musique_q()]), path))
    assert msg.startswith(f"{path}: byte 13 (line 1): is not valid UTF-8")
    assert msg.endswith("expected UTF-8 encoded text (re-save the file as UTF-8)")


def test_wrong_top_level_type(tmp_path):
    path = write(tmp_path, "musique_train.json", {"data": [musique_q()]})
    msg = message(lambda: load_musique(path))
    assert msg == (
        f"{path}: top level: is an object (keys ['data']); "
        "expected a JSON list of question objects {id, question, answer, paragraphs}"
    )


def test_missing_required_field(tmp_path):
    q = musique_q("2hop__17_18")
    del q["paragraphs"]
    path = write(tmp_path, "musique_train.json", [musique_q(), q])
    assert message(lambda: load_musique(path)) == (
        f"{path}: question 2 (id '2hop__17_18'): has no 'paragraphs'; "
        "expected a list of {title, paragraph_text, is_supporting}"
    )


def test_wrong_field_type(tmp_path):
    q = musique_q()
    q["paragraphs"][1]["is_supporting"] = "no"
    path = write(tmp_path, "musique_train.json", [q])
    assert message(lambda: load_musique(path)) == (
        f"{path}: question 1 (id '2hop__1_2') paragraph 2: has 'is_supporting' as a string; "
        "expected is_supporting as true/false"
    )


def test_wrong_record_type(tmp_path):
    path = write(tmp_path, "dev.json", [hotpot_q(), ["not", "an", "object"]])
    msg = message(lambda: load_hotpotqa(path))
    assert msg.startswith(f"{path}: question 2: is a list; expected a question object")


def test_empty_corpus(tmp_path):
    corpus = write(tmp_path, "musique_train_corpus.json", [])
    msg = message(lambda: load_hipporag(write(tmp_path, "q.json", [musique_q()]), corpus))
    assert msg == (
        f"{corpus}: top level: is an empty list; "
        "expected a JSON list of {title, text} passages, or an object {title: text or [sentence, ...]}"
    )


def test_gfmrag_empty_corpus_object(tmp_path):
    write(tmp_path, "raw/dataset_corpus.json", {})
    write(tmp_path, "raw/test.json", [{"id": "1", "question": "Q?", "supporting_facts": ["A"]}])
    msg = message(lambda: load_gfmrag(tmp_path))
    assert msg.startswith(f"{tmp_path / 'raw/dataset_corpus.json'}: corpus: has no passages")


def test_duplicate_title_with_different_text_in_contexts(tmp_path):
    other = hotpot_q("h2", context=[["A", ["A was born in 1850."]], ["B", ["B was born in 1901.", " B died."]]])
    path = write(tmp_path, "dev.json", [hotpot_q(), other])
    assert message(lambda: load_2wiki(path)) == (
        f"{path}: question 2 (id 'h2') context 1: gives title 'A' a different text than "
        "question 1 (id 'h1') context 1; expected one text per title, since this format names gold passages by title"
    )


def test_duplicate_title_in_gfmrag_list_corpus(tmp_path):
    write(tmp_path, "raw/dataset_corpus.json", [{"title": "A", "text": "one"}, {"title": "A", "text": "two"}])
    write(tmp_path, "raw/train.json", [{"id": "1", "question": "Q?", "supporting_facts": ["A"]}])
    msg = message(lambda: load_gfmrag(tmp_path))
    assert msg.startswith(f"{tmp_path / 'raw/dataset_corpus.json'}: passage 2: gives title 'A' a different text")


def test_supporting_title_not_in_corpus_is_an_error_where_gold_must_resolve(tmp_path):
    write(tmp_path, "raw/dataset_corpus.json", {"A": "A was born in 1900."})
    train = write(tmp_path, "raw/train.json", [{"id": "q7", "question": "Q?", "supporting_facts": [["A", 0], "Z"]}])
    assert message(lambda: load_gfmrag(tmp_path, "train")) == (
        f"{train}: question 1 (id 'q7'): has supporting title 'Z' that is not in dataset_corpus.json; "
        "expected supporting_facts titles that are keys of the corpus"
    )
    path = write(tmp_path, "dev.json", [hotpot_q(supporting_facts=[["A", 0], ["Z", 0]])])
    assert "question 1 (id 'h1'): has supporting title 'Z' that is in neither" in message(lambda: load_hotpotqa(path))


def test_hipporag_supporting_paragraph_not_in_corpus(tmp_path):
    corpus = write(tmp_path, "c.json", [{"title": "Dune", "text": "A different text."}])
    path = write(tmp_path, "q.json", [musique_q()])
    msg = message(lambda: load_hipporag(path, corpus))
    assert msg.startswith(
        f"{path}: question 1 (id '2hop__1_2'): has supporting paragraph 1 'Dune' that is not in c.json"
    )


def test_question_without_context_is_counted_not_an_error(tmp_path):
    no_context = hotpot_q("h2", context=None, supporting_facts=[["Z", 0]])
    resolvable = hotpot_q("h3", context=None)
    ds = load_2wiki(write(tmp_path, "dev.json", [hotpot_q(), no_context, resolvable]))
    assert [q.id for q in ds.qa] == ["h1", "h3"]
    assert ds.report.counts == {"question_without_context_dropped": 1, "question_without_context_resolved": 1}
    assert ds.report.examples["question_without_context_dropped"] == ["question 2 (id 'h2'): 'Z' not in the corpus"]


def test_sentence_index_out_of_range_is_counted(tmp_path):
    ds = load_2wiki(write(tmp_path, "dev.json", [hotpot_q(supporting_facts=[["A", 0], ["B", 5]])]))
    assert ds.report.counts == {"supporting_sentence_out_of_range": 1}
    assert ds.qa[0].hops == 2


def test_duplicate_question_ids(tmp_path):
    path = write(tmp_path, "dev.json", [hotpot_q("h1"), hotpot_q("h2"), hotpot_q("h1")])
    assert message(lambda: load_hotpotqa(path)) == (
        f"{path}: question 3 (id 'h1'): repeats the id of question 1 (id 'h1'); expected a unique id per question"
    )


def test_empty_question_text(tmp_path):
    path = write(tmp_path, "musique_train.json", [musique_q(question="   ")])
    assert message(lambda: load_musique(path)) == (
        f"{path}: question 1 (id '2hop__1_2'): has an empty 'question'; expected a non-empty question string"
    )


def test_question_without_supporting_passage(tmp_path):
    q = musique_q(paragraphs=[para("Dune", "Dune was published by Chilton.", False)])
    path = write(tmp_path, "musique_train.json", [q])
    assert message(lambda: load_musique(path)) == (
        f"{path}: question 1 (id '2hop__1_2'): has no paragraph with is_supporting true; "
        "expected at least one supporting paragraph"
    )
    path = write(tmp_path, "dev.json", [hotpot_q(supporting_facts=[])])
    assert message(lambda: load_hotpotqa(path)).startswith(
        f"{path}: question 1 (id 'h1'): has an empty 'supporting_facts'"
    )


def test_malformed_evidence_triple(tmp_path):
    corpus = write(tmp_path, "c.json", [{"title": "A", "text": "a"}])
    path = write(tmp_path, "q.json", [{"id": "x", "question": "Q?", "answer": "a", "evidence": [["A", "r"]]}])
    assert message(lambda: load_linearrag(path, corpus)) == (
        f"{path}: question 1 (id 'x'): has evidence 1 = ['A', 'r']; "
        "expected a list of [head, relation, tail] string triples"
    )


def test_non_ascii_is_accepted_and_preserved(tmp_path):
    """Real 2WikiMultihopQA titles and text (dev question b088d3ca08e2...)."""
    context = [
        [
            "Pál Gábor",
            ["Pál Gábor (2 November 1932 – 21 October 1987) was a Hungarian film director and screenwriter."],
        ],
        ["Miloš Zličić", ["Miloš Zličić( born 29 December 1999) is a Serbian football forward."]],
        [
            "La Bestia humana",
            ['La Bestia humana is a 1957 Argentine film whose story is based on the novel" La Bête Humaine".'],
        ],
    ]
    q = hotpot_q("b088", question="Who directed Forbidden Ground — Pál Gábor?", answer="Pál Gábor", context=context)
    q["supporting_facts"] = [["Pál Gábor", 0], ["Miloš Zličić", 0]]
    ds = load_2wiki(write(tmp_path, "dev.json", [q]))
    assert [p.title for p in ds.corpus] == ["Pál Gábor", "Miloš Zličić", "La Bestia humana"]
    assert ds.corpus[0].text == context[0][1][0]
    assert ds.corpus[2].text.endswith('La Bête Humaine".')
    assert ds.qa[0].answers == ("Pál Gábor",) and ds.qa[0].question.endswith("— Pál Gábor?")
    assert ds.report.counts == {}
