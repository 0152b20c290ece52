import json

import numpy as np
import pytest
import scipy.sparse as sp

from glmrag.data.types import Corpus, DataFormatError, Passage
from glmrag.index.gfmrag_io import export_gfmrag, import_gfmrag, read_kg_txt
from glmrag.index.kg import KGIndex

P1 = Passage.make("Thomas Sudhof", "Thomas Sudhof is a professor at Stanford University.")
P2 = Passage.make("Stanford", "Stanford University is in California.")
CORPUS = Corpus([P1, P2])


def _index(entities=None) -> KGIndex:
    entities = entities or ["california", "stanford univ", "stanford university", "thomas sudhof"]
    ep = sp.csr_matrix(np.array([[0, 1], [0, 1], [1, 1], [1, 0]], dtype=np.float32))
    triples = np.array([[1, 0, 2], [2, 2, 0], [3, 1, 2], [3, 3, 2]])  # sorted, as build_index makes them
    return KGIndex(entities, ["equivalent", "professor at", "located in", "works at"], triples, CORPUS.ids, ep)


def _same(a: KGIndex, b: KGIndex) -> None:
    assert a.entities == b.entities
    assert sorted(a.relations) == b.relations
    remap = np.array([b.relations.index(r) for r in a.relations])
    a_rows = sorted(np.stack([a.triples[:, 0], remap[a.triples[:, 1]], a.triples[:, 2]], 1).tolist())
    assert a_rows == b.triples.tolist()
    assert (a.entity_passages != b.entity_passages).nnz == 0


def test_round_trip(tmp_path):
    index = _index()
    export_gfmrag(index, CORPUS, tmp_path)
    lines = (tmp_path / "kg.txt").read_text().splitlines()
    assert "thomas sudhof,works at,stanford university" in lines
    assert "stanford univ,equivalent,stanford university" in lines
    assert all(len(line.split(",")) == 3 for line in lines)  # what GFM-RAG's reader splits on
    doc2ent = json.loads((tmp_path / "document2entities.json").read_text())
    assert doc2ent == {
        "Thomas Sudhof": ["stanford university", "thomas sudhof"],
        "Stanford": ["california", "stanford univ", "stanford university"],
    }
    back = import_gfmrag(tmp_path, CORPUS)
    _same(index, back)
    assert back.manifest["import_report"] == {"titles_not_in_corpus": 0, "passages_without_entry": 0}


def test_commas_and_quotes_are_quoted(tmp_path):
    index = _index(["california", 'stanford "univ"', "stanford university", "sudhof, thomas"])
    export_gfmrag(index, CORPUS, tmp_path)
    text = (tmp_path / "kg.txt").read_text()
    assert '"sudhof, thomas",works at,stanford university' in text
    assert '"stanford ""univ""",equivalent,stanford university' in text
    _same(index, import_gfmrag(tmp_path, CORPUS))


def test_bad_line_and_unknown_titles(tmp_path):
    (tmp_path / "kg.txt").write_text("a,r,b\na,b\n")
    with pytest.raises(DataFormatError, match="line 2"):
        read_kg_txt(tmp_path / "kg.txt")
    (tmp_path / "kg.txt").write_text("thomas sudhof,works at,stanford university\n")
    (tmp_path / "document2entities.json").write_text(json.dumps({"Thomas Sudhof": ["thomas sudhof"], "Other": ["x"]}))
    index = import_gfmrag(tmp_path, CORPUS)
    assert index.manifest["import_report"] == {"titles_not_in_corpus": 1, "passages_without_entry": 1}
    assert index.relations == ["equivalent", "works at"]
    assert index.entities_of_passages([P2.id]) == []


def test_passages_sharing_a_title_share_an_entry(tmp_path):
    corpus = Corpus([Passage.make("Same", "one"), Passage.make("Same", "two")])
    ep = sp.csr_matrix(np.array([[1, 0], [0, 1]], dtype=np.float32))
    index = KGIndex(["a", "b"], ["equivalent", "r"], np.array([[0, 1, 1]]), corpus.ids, ep)
    export_gfmrag(index, corpus, tmp_path)
    assert json.loads((tmp_path / "document2entities.json").read_text()) == {"Same": ["a", "b"]}
