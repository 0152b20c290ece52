"""Importers on real data: the embedded MuSiQue set, the shared 2Wiki files, tiny fixtures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from glmrag.data.embedded_files import embedded_path
from glmrag.data.importers import (
    join_sentences,
    load_2wiki,
    load_gfmrag,
    load_hipporag,
    load_hotpotqa,
    load_linearrag,
    load_musique,
    normalise_title,
    read_json,
)
from glmrag.data.registry import default_data_dir
from glmrag.data.types import Passage

FIXTURES = Path(__file__).parent / "fixtures"
SHARED = default_data_dir()
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")


@pytest.fixture(scope="module")
def musique():
    return load_hipporag(embedded_path("musique_train.json"), embedded_path("musique_train_corpus.json"))


def test_hipporag_musique_counts_hops_and_answers(musique):
    assert (len(musique.qa), len(musique.corpus)) == (100, 1890)
    assert Counter(q.hops for q in musique.qa) == {2: 68, 3: 27, 4: 5}
    q0 = musique.qa[0]
    assert q0.id == "2hop__150763_14904"
    assert q0.answers == ("G. Stanley Hall", "Stanley Hall")
    assert q0.type == "2hop"
    assert q0.decomposition == (
        "What company published Journal of Psychotherapy Integration?",
        "Who was the first president of #1 ?",
    )
    assert musique.report.counts == {}


def test_hipporag_gold_equals_is_supporting_paragraphs(musique):
    raw = read_json(embedded_path("musique_train.json"))
    for q, r in zip(musique.qa, raw, strict=True):
        expected = [Passage.make(p["title"], p["paragraph_text"]).id for p in r["paragraphs"] if p["is_supporting"]]
        assert list(q.supporting) == expected
        assert all(pid in musique.corpus for pid in q.supporting)


def test_shared_titles_keep_distinct_passages(musique):
    titles = Counter(p.title for p in musique.corpus)
    shared = [t for t, n in titles.items() if n > 1]
    assert len(shared) == 85  # legit in MuSiQue: gold is matched by (title, text), not title
    assert len({p.id for p in musique.corpus}) == 1890


def test_official_musique_union_equals_hipporag_corpus(musique):
    union = load_musique(embedded_path("musique_train.json"))
    assert union.corpus.ids == musique.corpus.ids  # same passages in the same first-seen order
    assert union.report.counts == {"duplicate_passage": 2000 - 1890}
    assert [q.supporting for q in union.qa] == [q.supporting for q in musique.qa]


def test_toy_sample():
    ds = load_hipporag(embedded_path("sample.json"), embedded_path("sample_corpus.json"))
    assert [p.title for p in ds.corpus] == ["Thomas C. Sudhof", "David Eagleman", "Karl Deisseroth"]
    q = ds.qa[0]
    assert (q.id, q.answers, q.hops) == ("sample/question_1.json", ("Thomas C. Sudhof",), 1)
    assert q.supporting == (ds.corpus[0].id,)


def test_join_sentences_keeps_leading_spaces_and_adds_missing_ones():
    assert join_sentences(["A b.", " C d."]) == "A b. C d."  # HotpotQA style
    assert join_sentences(["A b.", "C d."]) == "A b. C d."  # 2Wiki style
    assert join_sentences([]) == ""


def test_hotpotqa_fixture():
    ds = load_hotpotqa(FIXTURES / "hotpotqa_tiny.json")
    assert len(ds.qa) == 2 and len(ds.corpus) == 5  # "Ed Wood" appears twice, merged
    assert ds.report.counts == {"duplicate_passage": 1}
    by_title = {p.title: p for p in ds.corpus}
    assert by_title["Scott Derrickson"].text == (
        "Scott Derrickson (born July 16, 1966) is an American director, screenwriter and producer. "
        "He lives in Los Angeles, California."
    )
    q0, q1 = ds.qa
    assert q0.answers == ("yes",) and q0.type == "comparison" and q0.hops == 2
    assert q0.supporting == (by_title["Scott Derrickson"].id, by_title["Ed Wood"].id)
    assert q1.supporting == (by_title["Kiss and Tell (1945 film)"].id, by_title["Shirley Temple"].id)


def test_gfmrag_fixture_splits_and_title_forms():
    folder = FIXTURES / "gfmrag_tiny"
    train, test, both = (load_gfmrag(folder, s) for s in ("train", "test", None))
    assert (len(train.qa), len(test.qa), len(both.qa)) == (1, 1, 2)
    assert len(both.corpus) == 6 and both.name == "gfmrag_tiny"
    titles = {p.id: p.title for p in both.corpus}
    assert [titles[p] for p in train.qa[0].supporting] == ["Forbidden Ground", "Free Guy", "Pál Gábor", "Shawn Levy"]
    assert [titles[p] for p in test.qa[0].supporting] == ["Forbidden Ground", "Pál Gábor"]
    assert test.qa[0].answers == ("Pál Gábor",)


def test_normalise_title():
    assert normalise_title("Love, Honor, and Oh Baby!") == "lovehonorandohbaby"
    assert normalise_title("Pál  Gábor") == normalise_title("pál gábor") == "pálgábor"


def test_linearrag_resolution_exact_normalised_and_missing(tmp_path):
    corpus = [
        {"title": "Queen of Spades", "text": "A card."},
        {"title": "Queen of spades", "text": "A game."},
        {"title": "Lothair II", "text": "A king."},
    ]
    questions = [
        {
            "id": "a",
            "question": "Q?",
            "answer": "x",
            "evidence": [["Lothair II", "mother", "E"], ["Lothair II", "r", "y"]],
        },
        {"id": "b", "question": "Q?", "answer": "x", "evidence": [["lothair ii", "r", "y"], ["Nobody", "r", "z"]]},
        {"id": "c", "question": "Q?", "answer": "x", "evidence": [["QUEEN OF SPADES", "r", "y"]]},
        {"id": "d", "question": "Q?", "answer": "x", "evidence": [["Nobody", "r", "z"]]},
    ]
    (tmp_path / "q.json").write_text(json.dumps(questions))
    (tmp_path / "c.json").write_text(json.dumps(corpus))
    ds = load_linearrag(tmp_path / "q.json", tmp_path / "c.json")
    lothair, card, game = ds.corpus[2].id, ds.corpus[0].id, ds.corpus[1].id
    assert [q.supporting for q in ds.qa] == [(lothair,), (lothair,), (card, game), ()]
    assert [q.hops for q in ds.qa] == [1, 2, 1, 1]
    assert ds.report.stats == {
        "gold_full": 2, "gold_partial": 1, "gold_none": 1,
        "heads": 5, "heads_exact": 1, "heads_normalised": 2, "heads_unresolved": 2,
    }  # fmt: skip
    assert ds.report.counts["evidence_head_ambiguous"] == 1


@needs_shared
def test_2wiki_dev_drops_questions_without_context_and_keeps_accents():
    ds = load_2wiki(SHARED / "2wiki-dev-200/2wiki_dev200.original.jsonl")
    assert (len(ds.qa), len(ds.corpus)) == (164, 1294)
    assert ds.report.counts["question_without_context_dropped"] == 36
    assert ds.report.examples["question_without_context_dropped"][0].startswith(
        "question 107 (id '13c1565a087311ebbd66ac1f6bf848b6')"
    )
    pal = next(p for p in ds.corpus if p.title == "Pál Gábor")
    assert pal.text.startswith("Pál Gábor (2 November 1932 – 21 October 1987) was a Hungarian film director")
    q0 = ds.qa[0]
    assert (q0.answers, q0.type, q0.hops) == (("Free Guy",), "bridge_comparison", 4)
    titles = {p.id: p.title for p in ds.corpus}
    assert [titles[p] for p in q0.supporting] == ["Forbidden Ground", "Free Guy", "Pál Gábor", "Shawn Levy"]


@needs_shared
def test_2wiki_train_counts():
    ds = load_2wiki(SHARED / "2wiki-dev-200/2wiki_train500_preprocess.original.json")
    assert (len(ds.qa), len(ds.corpus)) == (500, 3112)
    assert ds.report.counts == {"duplicate_passage": 5000 - 3112, "supporting_sentence_out_of_range": 6}
    assert Counter(q.hops for q in ds.qa) == {2: 408, 4: 92}


@needs_shared
def test_2wiki_test_linearrag_resolution():
    folder = SHARED / "2wiki-test-1000"
    ds = load_linearrag(folder / "questions_linearrag_format.json", folder / "2wikimultihopqa_corpus.json")
    assert (len(ds.qa), len(ds.corpus)) == (1000, 6119)
    stats = ds.report.stats
    assert (stats["gold_full"], stats["gold_partial"], stats["gold_none"]) == (765, 212, 23)
    assert (stats["heads"], stats["heads_exact"], stats["heads_normalised"]) == (2469, 2208, 4)
    q0 = ds.qa[0]
    assert (q0.answers, q0.type) == (("20 March 851",), "compositional")
    titles = {p.id: p.title for p in ds.corpus}
    assert [titles[p] for p in q0.supporting] == ["Lothair II", "Ermengarde of Tours"]
