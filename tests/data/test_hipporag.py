"""HippoRAG's released layout: every question shape its files use, read by ``data.format=hipporag``.

Gold is recomputed here from the raw JSON (the paper-independent rule HippoRAG's ``get_gold_docs`` uses: the
``is_supporting`` paragraphs, or the corpus passages of the ``supporting_facts`` titles), never from the loader.
"""

import json
from pathlib import Path

import pytest

from glmrag.data.files import load_files
from glmrag.data.importers import load_hipporag
from glmrag.data.types import DataFormatError, Passage

FIXTURES = Path(__file__).parent / "fixtures"
SHAPES = ["musique", "2wiki", "hotpotqa", "sample"]


def raw(name: str):
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def corpus_passages(name: str) -> list[Passage]:
    """The corpus file's passages in order: ``[{title, text}]`` or ``{title: text or [sentences]}``."""
    data = raw(name)
    pairs = [(p["title"], p["text"]) for p in data] if isinstance(data, list) else list(data.items())
    # HotpotQA sentences carry their own leading space: HippoRAG joins them with ""
    return [Passage.make(t, text if isinstance(text, str) else "".join(text)) for t, text in pairs]


def expected_gold(shape: str) -> list[list[str]]:
    passages = corpus_passages(f"hipporag_{shape}_corpus.json")
    by_title = {p.title: p.id for p in passages}
    gold = []
    for q in raw(f"hipporag_{shape}.json"):
        if "paragraphs" in q:
            gold.append(
                [Passage.make(p["title"], p["paragraph_text"]).id for p in q["paragraphs"] if p["is_supporting"]]
            )
        else:
            gold.append(list(dict.fromkeys(by_title[title] for title, _ in q["supporting_facts"])))
    return gold


@pytest.mark.parametrize("shape", SHAPES)
def test_every_released_shape_reads_with_its_gold(shape):
    ds = load_files(
        "hipporag", FIXTURES / f"hipporag_{shape}.json", FIXTURES / f"hipporag_{shape}_corpus.json", name="mine"
    )
    assert ds.corpus.ids == [p.id for p in corpus_passages(f"hipporag_{shape}_corpus.json")]
    assert [list(q.supporting) for q in ds.qa] == expected_gold(shape)
    assert all(pid in ds.corpus for q in ds.qa for pid in q.supporting)
    questions = raw(f"hipporag_{shape}.json")
    assert [q.question for q in ds.qa] == [q["question"] for q in questions]
    assert [q.answers[0] for q in ds.qa] == [
        q["answer"] if isinstance(q["answer"], str) else q["answer"][0] for q in questions
    ]


def test_hotpotqa_shape_takes_type_and_hops_from_the_record():
    ds = load_hipporag(FIXTURES / "hipporag_2wiki.json", FIXTURES / "hipporag_2wiki_corpus.json")
    q = ds.qa[0]
    assert (q.id, q.type, q.hops) == ("b088d3ca08e211ebbda4ac1f6bf848b6", "bridge_comparison", 4)
    assert ds.report.counts == {}


def test_records_without_ids_are_numbered_and_counted():
    ds = load_hipporag(FIXTURES / "hipporag_sample.json", FIXTURES / "hipporag_sample_corpus.json")
    assert [q.id for q in ds.qa] == ["0", "1"]
    assert ds.qa[1].answers == ("Saône", "the Saône")
    assert ds.report.counts == {"question_without_id": 2}


def write(folder: Path, name: str, obj) -> Path:
    path = folder / name
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def test_contexts_shape_and_answer_fields_hipporag_reads(tmp_path):
    corpus = write(tmp_path, "c.json", [{"title": "A", "text": "a."}, {"title": "B", "text": "b."}])
    records = [
        {
            "id": "x",
            "question": "Q1?",
            "gold_ans": "a",
            "contexts": [
                {"title": "A", "text": "a.", "is_supporting": True},
                {"title": "B", "text": "b.", "is_supporting": False},
            ],
        },
        {"id": "y", "question": "Q2?", "reference": ["b", "bee"]},  # no gold: kept, counted
    ]
    ds = load_hipporag(write(tmp_path, "q.json", records), corpus)
    assert [q.supporting for q in ds.qa] == [(Passage.make("A", "a.").id,), ()]
    assert [q.answers for q in ds.qa] == [("a",), ("b", "bee")]
    assert ds.report.counts == {"question_without_gold": 1}


def test_a_title_shared_by_corpus_passages_is_settled_by_the_context(tmp_path):
    corpus = write(
        tmp_path, "c.json", [{"title": "A", "text": "First A."}, {"title": "A", "text": "Second A. Born 1900."}]
    )
    q = {
        "_id": "h",
        "question": "Q?",
        "answer": "1900",
        "supporting_facts": [["A", 1]],
        "context": [["A", ["Second A.", "Born 1900."]]],
    }
    ds = load_hipporag(write(tmp_path, "q.json", [q]), corpus)
    assert ds.qa[0].supporting == (Passage.make("A", "Second A. Born 1900.").id,)
    q["context"] = [["A", ["Third A."]]]
    with pytest.raises(DataFormatError, match=r"question 1 \(id 'h'\): has supporting title 'A' shared by 2 passages"):
        load_hipporag(write(tmp_path, "q.json", [q]), corpus)


def test_a_supporting_title_missing_from_the_corpus_names_file_and_record(tmp_path):
    path = FIXTURES / "hipporag_hotpotqa.json"
    corpus = write(tmp_path, "mine_corpus.json", {"Ed Wood": "x", "Scott Derrickson": "y"})
    with pytest.raises(DataFormatError) as e:
        load_hipporag(path, corpus)
    assert str(e.value).startswith(
        f"{path}: question 2 (id '5a8c7595554299585d9e36b6'): "
        "has supporting title 'Kiss and Tell (1945 film)' that is not in mine_corpus.json"
    )


def test_a_wrong_format_names_the_file_the_record_and_the_format_that_reads_it():
    hotpot = FIXTURES / "hotpotqa_tiny.json"
    with pytest.raises(DataFormatError) as e:
        load_files("musique", hotpot)
    msg = str(e.value)
    assert msg.startswith(f"{hotpot}: question 1 (id '5a8b57f25542995d1e6f1371'): has no 'paragraphs'")
    assert msg.endswith(
        f"{hotpot}: question 1 has '_id', 'answer', 'question', 'supporting_facts', 'context', "
        "'type', 'level' (HotpotQA shape): data.format=hotpotqa reads it"
    )

    musique = FIXTURES / "hipporag_musique.json"  # MuSiQue records read as HotpotQA: no contexts, no corpus
    with pytest.raises(DataFormatError) as e:
        load_files("hotpotqa", musique)
    assert "(MuSiQue shape): data.format=musique reads it" in str(e.value)

    with pytest.raises(DataFormatError) as e:  # HotpotQA questions with another dataset's corpus
        load_files("hipporag", hotpot, FIXTURES / "hipporag_musique_corpus.json")
    assert str(e.value).endswith("(HotpotQA shape): data.format=hotpotqa with data.corpus=null reads it")


def test_a_malformed_file_of_the_right_format_gets_no_suggestion(tmp_path):
    q = raw("hipporag_musique.json")[0]
    q["paragraphs"][0]["is_supporting"] = "yes"
    with pytest.raises(DataFormatError) as e:
        load_files("musique", write(tmp_path, "musique_dev.json", [q]))
    assert "data.format=" not in str(e.value)
