"""The dataset registry, its splits, the embedded files and the OpenIE file musique100 ships."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from glmrag.data.embedded_files import SOURCES, manifest, materialize, read_embedded_bytes
from glmrag.data.registry import (
    DATASETS,
    DEFAULT_DATASET,
    default_data_dir,
    load_dataset,
    split_assignment,
)
from glmrag.index.cache import make_extractor

SHARED = default_data_dir()
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Decompressed embedded files go to a per-session temporary cache, not ~/.cache."""
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def test_registry_names_and_default():
    assert list(DATASETS) == ["musique100", "toy", "2wiki_dev", "2wiki_train", "2wiki_test"]
    assert DEFAULT_DATASET == "musique100"
    assert all(spec.description for spec in DATASETS.values())
    assert [n for n, s in DATASETS.items() if s.embedded] == ["musique100", "toy", "2wiki_train"]


def test_musique100_with_openie():
    ds = load_dataset("musique100")
    assert (ds.name, len(ds.qa), len(ds.corpus)) == ("musique100", 100, 1890)
    assert Counter(q.hops for q in ds.qa) == {2: 68, 3: 27, 4: 5}
    assert ds.openie_path is not None and ds.openie_path.endswith(".json")
    extractor = make_extractor("openie", ds)
    extractions = extractor.extract(ds.corpus)  # every corpus passage has its doc, or this raises
    assert [e.passage_id for e in extractions] == [p.id for p in ds.corpus]
    assert extractor.report["docs"] == 1890 and extractor.report["docs_not_in_corpus"] == 0
    # HippoRAG's file holds 17,419 triples; 185 of them have not three parts and are dropped
    assert sum(len(e.triples) for e in extractions) == extractor.report["triples"] == 17234
    assert extractor.report["triples_bad_length"] == 185


def test_a_dataset_without_openie_asks_for_another_extractor():
    with pytest.raises(ValueError, match="dataset toy ships no OpenIE file; use index.extractor=spacy"):
        make_extractor("openie", load_dataset("toy"))


def test_splits_are_60_20_20_disjoint_and_keep_the_full_corpus():
    parts = {s: load_dataset("musique100", split=s) for s in ("train", "validation", "test")}
    assert {s: len(d.qa) for s, d in parts.items()} == {"train": 60, "validation": 20, "test": 20}
    ids = [q.id for d in parts.values() for q in d.qa]
    assert len(set(ids)) == 100
    assert all(len(d.corpus) == 1890 for d in parts.values())
    assert [q.id for q in parts["test"].qa] == [q.id for q in load_dataset("musique100", "test").qa]  # stable


def test_split_depends_only_on_ids():
    ids = [f"q{i}" for i in range(10)]
    a = split_assignment(ids)
    assert a == split_assignment(list(reversed(ids)))
    assert Counter(a.values()) == {"train": 6, "validation": 2, "test": 2}


def test_limit_keeps_first_questions_of_the_split():
    train = load_dataset("musique100", split="train")
    first = load_dataset("musique100", split="train", limit=5)
    assert [q.id for q in first.qa] == [q.id for q in train.qa][:5]
    assert len(load_dataset("toy", limit=0).qa) == 0


def test_bad_arguments():
    with pytest.raises(KeyError, match="unknown dataset 'musique'; registered: musique100, toy"):
        load_dataset("musique")
    with pytest.raises(ValueError, match="split 'dev' is not one of"):
        load_dataset("toy", split="dev")
    with pytest.raises(ValueError, match="limit must be None or >= 0"):
        load_dataset("toy", limit=-1)


def test_missing_external_data_says_where_it_looked(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError) as e:
        load_dataset("2wiki_dev", root=str(tmp_path))
    msg = str(e.value)
    assert f"2wiki-dev-200/2wiki_dev200.original.jsonl under {tmp_path} (the root argument)" in msg
    assert "GLMRAG_DATA_DIR" in msg and "root=" in msg
    monkeypatch.setenv("GLMRAG_DATA_DIR", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match=r"\(\$GLMRAG_DATA_DIR\)"):
        load_dataset("2wiki_test")


def test_embedded_files_match_manifest():
    entries = manifest()
    assert set(entries) == set(SOURCES)
    for name, entry in entries.items():
        data = read_embedded_bytes(name)
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["bytes"], entry["sha256"])
    plain = materialize("sample.json")
    assert plain.read_bytes() == read_embedded_bytes("sample.json")


@needs_shared
def test_embedded_files_are_byte_identical_to_shared_originals():
    for name, rel in SOURCES.items():
        original = (SHARED / rel).read_bytes()
        assert hashlib.sha256(read_embedded_bytes(name)).digest() == hashlib.sha256(original).digest(), name


@needs_shared
def test_external_datasets_sizes_and_splits():
    sizes = {
        n: (len(d.qa), len(d.corpus)) for n in ("2wiki_dev", "2wiki_train", "2wiki_test") for d in [load_dataset(n)]
    }
    assert sizes == {"2wiki_dev": (164, 1294), "2wiki_train": (500, 3112), "2wiki_test": (1000, 6119)}
    assert len(load_dataset("2wiki_test", split="validation", limit=50).qa) == 50
    test = load_dataset("2wiki_test")
    assert {k: test.report.stats[k] for k in ("gold_full", "gold_partial", "gold_none")} == {
        "gold_full": 765,
        "gold_partial": 212,
        "gold_none": 23,
    }
