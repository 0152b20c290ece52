import json
import logging

import numpy as np
import pytest
import scipy.sparse as sp

import glmrag.io
from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.build import IndexSettings
from glmrag.index.extractors import Extractor, PassageExtraction
from glmrag.index.kg import EntityLink, KGIndex
from glmrag.index.store import StaleIndexError, load_index, load_or_build, read_manifest, save_index


def _index(with_embeddings: bool = True, with_facts: bool = True) -> KGIndex:
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(4, 8)).astype(np.float32) if with_embeddings else None
    ep = sp.csr_matrix(np.array([[1, 0], [1, 1], [0, 1], [0, 1]], dtype=np.float32))
    return KGIndex(
        entities=["pál gábor", "são paulo", "c", "stanford university"],
        relations=["born in", "equivalent", "lives in"],
        triples=np.array([[0, 0, 1], [0, 2, 1], [2, 1, 3]]),
        passage_ids=["p1", "p2"],
        entity_passages=ep,
        entity_embeddings=emb,
        question_links={"q1": [EntityLink("Pál", 0, 0.93), EntityLink("São Paulo", 1, 1.0)], "q2": []},
        manifest={"corpus_hash": "abc", "settings": {"synonym_top_k": 100}, "counts": {"entities": 4}},
        passage_facts=sp.csr_matrix(np.array([[1, 2, 0], [0, 1, 0]], dtype=np.float32)) if with_facts else None,
    )


def _assert_same(a: KGIndex, b: KGIndex) -> None:
    assert a.entities == b.entities and a.relations == b.relations and a.passage_ids == b.passage_ids
    assert np.array_equal(a.triples, b.triples) and b.triples.dtype == np.int64
    assert (a.entity_passages != b.entity_passages).nnz == 0 and a.entity_passages.shape == b.entity_passages.shape
    assert (a.entity_embeddings is None) == (b.entity_embeddings is None)
    if a.entity_embeddings is not None:
        assert np.array_equal(a.entity_embeddings, b.entity_embeddings)
    assert a.question_links == b.question_links
    assert (a.passage_facts is None) == (b.passage_facts is None)
    if a.passage_facts is not None:
        assert (a.passage_facts != b.passage_facts).nnz == 0 and a.passage_facts.shape == b.passage_facts.shape
    for field in ("indptr", "neighbor", "edge_type", "triple"):
        assert np.array_equal(getattr(a.adjacency, field), getattr(b.adjacency, field))
    drop = ("files", "format_version", "embeddings", "passage_facts")
    assert {k: v for k, v in b.manifest.items() if k not in drop} == {
        k: v for k, v in a.manifest.items() if k not in drop
    }


@pytest.mark.parametrize("with_embeddings, with_facts", [(True, True), (False, True), (True, False)])
def test_round_trip(tmp_path, with_embeddings, with_facts):
    index = _index(with_embeddings, with_facts)
    folder = save_index(index, tmp_path / "idx")
    loaded = load_index(folder, expect={"corpus_hash": "abc"})
    _assert_same(index, loaded)
    assert "adjacency" in loaded.__dict__  # read from adjacency.npz, not recomputed
    assert loaded.relation_name(int(loaded.adjacency.edge_type.max())) == "inverse_lives in"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no temp folders left


def test_files_are_open_formats(tmp_path):
    folder = save_index(_index(), tmp_path / "idx")
    names = {p.name for p in folder.iterdir()}
    assert names == {
        "manifest.json",
        "entities.json",
        "relations.json",
        "passage_ids.json",
        "triples.npy",
        "adjacency.npz",
        "entity_passages.npz",
        "entity_embeddings.npy",
        "passage_facts.npz",
        "question_links.jsonl",
    }
    assert json.loads((folder / "entities.json").read_text())[0] == "pál gábor"
    with np.load(folder / "entity_passages.npz", allow_pickle=False) as z:
        assert z["shape"].tolist() == [4, 2] and z["indptr"].tolist() == [0, 1, 3, 4, 5]
    assert json.loads((folder / "question_links.jsonl").read_text().splitlines()[0])["links"][0] == {
        "mention": "Pál",
        "entity": 0,
        "score": 0.93,
    }


def test_replacing_an_index_is_atomic(tmp_path, monkeypatch):
    folder = save_index(_index(), tmp_path / "idx")
    second = _index()
    second.entities[2] = "c plus plus"
    save_index(second, folder)
    assert load_index(folder).entities[2] == "c plus plus"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]

    calls = []

    def crash(path, data):
        calls.append(path.name)
        if len(calls) == 3:
            raise OSError("disk full")
        return real_write(path, data)

    real_write = glmrag.io._write_synced
    monkeypatch.setattr(glmrag.io, "_write_synced", crash)
    with pytest.raises(OSError, match="disk full"):
        save_index(_index(), folder)
    monkeypatch.undo()
    assert load_index(folder).entities[2] == "c plus plus"  # the old index is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # and the half-written one is gone


def test_missing_or_corrupt_manifest_is_refused(tmp_path):
    with pytest.raises(StaleIndexError, match="no manifest.json"):
        load_index(tmp_path / "nothing")
    folder = save_index(_index(), tmp_path / "idx")
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(StaleIndexError, match="unreadable manifest"):
        load_index(folder)
    (folder / "manifest.json").write_text(json.dumps({"format_version": 0}))
    with pytest.raises(StaleIndexError, match="format_version 0"):
        read_manifest(folder)


def test_corrupt_or_missing_files_are_refused(tmp_path):
    folder = save_index(_index(), tmp_path / "idx")
    data = (folder / "triples.npy").read_bytes()
    (folder / "triples.npy").write_bytes(data[: len(data) // 2])  # half-written
    with pytest.raises(StaleIndexError, match="triples.npy: checksum mismatch"):
        load_index(folder)
    (folder / "triples.npy").unlink()
    with pytest.raises(StaleIndexError, match="triples.npy: missing"):
        load_index(folder)


def test_stale_index_says_what_differs(tmp_path):
    folder = save_index(_index(), tmp_path / "idx")
    with pytest.raises(StaleIndexError) as err:
        load_index(folder, expect={"corpus_hash": "xyz", "settings": {"synonym_top_k": 10}})
    msg = str(err.value)
    assert "corpus_hash: index has 'abc', expected 'xyz'" in msg
    assert "settings.synonym_top_k: index has 100, expected 10" in msg
    assert "rebuild" in msg


class CountingExtractor(Extractor):
    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def settings(self) -> dict:
        return {}

    def extract(self, corpus):
        self.calls += 1
        return [PassageExtraction(p.id, [p.title], [(p.title, "mentions", "thing")]) for p in corpus]


def test_load_or_build(tmp_path, caplog):
    corpus = Corpus([Passage.make("Alpha", "Alpha text."), Passage.make("Beta", "Beta text.")])
    questions = [Question("q", "Alpha?", ("Alpha",), (corpus[0].id,))]
    settings = IndexSettings(embed_model=None)
    extractor = CountingExtractor()
    folder = tmp_path / "idx"
    built = load_or_build(folder, corpus, questions, extractor, None, settings)
    again = load_or_build(folder, corpus, questions, extractor, None, settings)
    assert extractor.calls == 1
    _assert_same(built, again)

    other = IndexSettings(embed_model=None, synonym_top_k=5)
    with pytest.raises(StaleIndexError, match="settings.synonym_top_k"):
        load_or_build(folder, corpus, questions, extractor, None, other, rebuild=False)
    with caplog.at_level(logging.WARNING, logger="glmrag.index.store"):
        rebuilt = load_or_build(folder, corpus, questions, extractor, None, other)
    assert extractor.calls == 2 and "rebuilding the index" in caplog.text and "synonym_top_k" in caplog.text
    assert rebuilt.manifest["settings"]["synonym_top_k"] == 5
    load_or_build(folder, corpus, questions, extractor, None, other, rebuild=True)
    assert extractor.calls == 3
    assert load_index(folder).question_links["q"][0].entity == built.entity_id["alpha"]
