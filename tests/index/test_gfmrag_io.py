import ast
import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from glmrag.data.formats.common import DataFileNotFoundError
from glmrag.data.types import Corpus, DataFormatError, Passage
from glmrag.index.gfmrag2_io import export_gfmrag2, import_gfmrag2
from glmrag.index.gfmrag_io import export_gfmrag, import_gfmrag, read_kg_txt
from glmrag.index.kg import KGIndex

P1 = Passage.make("Thomas Sudhof", "Thomas Sudhof is a professor at Stanford University.")
P2 = Passage.make("Stanford", "Stanford University is in California.")
CORPUS = Corpus([P1, P2])


def _index(entities=None, corpus=CORPUS) -> KGIndex:
    entities = entities or ["california", "stanford univ", "stanford university", "thomas sudhof"]
    ep = sp.csr_matrix(np.array([[0, 1], [0, 1], [1, 1], [1, 0]], dtype=np.float32))
    triples = np.array([[1, 0, 2], [2, 2, 0], [3, 1, 2], [3, 3, 2]])  # sorted, as build_index makes them
    return KGIndex(entities, ["equivalent", "professor at", "located in", "works at"], triples, corpus.ids, ep)


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


# GFM-RAG 2.0: nodes.csv, relations.csv, edges.csv


def test_gfmrag2_export_is_what_gfmrag_writes(tmp_path):
    """Our files equal, byte for byte, what gfmrag 2.0's GraphIndexer writes (pandas to_csv(index=False)) for
    the graph its KGConstructor.build_graph returns: documents first, attributes as Python dicts."""
    corpus = Corpus([P1, Passage.make("Stanford", 'Stanford University is in Stanford, California ("the Farm").')])
    index = _index(corpus=corpus)
    export_gfmrag2(index, corpus, tmp_path / "ours")

    def doc(title, text):
        return {"name": title, "type": "document", "attributes": {"content": text}}

    def ent(name):
        return {"name": name, "type": "entity", "attributes": {}}

    def edge(h, r, t):
        return {"source": h, "relation": r, "target": t, "attributes": {}}

    graph = {
        "nodes": [doc(P1.title, P1.text), doc("Stanford", corpus[1].text)]
        + [ent(e) for e in ["california", "stanford univ", "stanford university", "thomas sudhof"]],
        "relations": [
            {"name": r, "attributes": {}}
            for r in ["equivalent", "professor at", "located in", "works at", "is_mentioned_in"]
        ],
        "edges": [
            edge("stanford univ", "equivalent", "stanford university"),
            edge("stanford university", "located in", "california"),
            edge("thomas sudhof", "professor at", "stanford university"),
            edge("thomas sudhof", "works at", "stanford university"),
            edge("stanford university", "is_mentioned_in", "Thomas Sudhof"),
            edge("thomas sudhof", "is_mentioned_in", "Thomas Sudhof"),
            edge("california", "is_mentioned_in", "Stanford"),
            edge("stanford univ", "is_mentioned_in", "Stanford"),
            edge("stanford university", "is_mentioned_in", "Stanford"),
        ],
    }
    for part in ("nodes", "relations", "edges"):
        pd.DataFrame(graph[part]).to_csv(tmp_path / f"{part}.csv", index=False)
        assert (tmp_path / "ours" / f"{part}.csv").read_text() == (tmp_path / f"{part}.csv").read_text(), part
    assert (
        '"{\'content\': \'Stanford University is in Stanford, California (""the Farm"").\'}"'
        in (tmp_path / "nodes.csv").read_text()
    )  # the quoting the comparison covers

    back = import_gfmrag2(tmp_path / "ours", corpus)
    _same(index, back)
    assert back.manifest["import_report"] == {"titles_not_in_corpus": 0, "passages_without_entry": 0}


def test_gfmrag2_reads_handwritten_files(tmp_path):
    (tmp_path / "nodes.csv").write_text(
        "name,type,attributes,uid\n"
        "Thomas Sudhof,document,\"{'content': 'Thomas Sudhof is a professor, at Stanford.'}\",d1\n"
        "Other,document,{'content': 'x'},d2\n"
        "thomas sudhof,entity,{},e1\n"
        "stanford university,entity,{},e2\n"
        "\n"
        "stanford univ,entity,{},e3\n"
        "lonely,entity,{'note': 'no edge'},e4\n"
    )
    (tmp_path / "relations.csv").write_text(
        "name,attributes\nworks at,{}\nequivalent,{}\nis_mentioned_in,{}\nunused,{'x': 1}\n"
    )
    (tmp_path / "edges.csv").write_text(
        "source,relation,target,attributes\n"
        "e1,works at,e2,{}\n"
        "e1,works at,e2,{'weight': 0.5}\n"
        "e3,equivalent,e2,{}\n"
        "e1,is_mentioned_in,d1,{}\n"
        "e2,is_mentioned_in,d1,{}\n"
        "e4,is_mentioned_in,d2,{}\n"
    )
    index = import_gfmrag2(tmp_path, CORPUS)
    assert index.entities == ["lonely", "stanford univ", "stanford university", "thomas sudhof"]
    assert index.relations == ["equivalent", "unused", "works at"]
    named = {(index.entities[h], index.relations[r], index.entities[t]) for h, r, t in index.triples.tolist()}
    assert named == {
        ("thomas sudhof", "works at", "stanford university"),
        ("stanford univ", "equivalent", "stanford university"),
    }
    assert len(index.triples) == 2  # the repeated edge is one triple
    assert sorted(index.entities_of_passages([P1.id])) == [2, 3]
    assert index.entities_of_passages([P2.id]) == []
    assert index.manifest["import_report"] == {"titles_not_in_corpus": 1, "passages_without_entry": 1}


def test_gfmrag2_entity_named_like_a_title_gets_a_uid(tmp_path):
    """GFM-RAG keys nodes by name, so the entity 3642 and the passage titled 3642 need uids to stay two nodes."""
    corpus = Corpus([Passage.make("3642", "3642 is a number."), P2])
    index = _index(["3642", "california", "stanford univ", "stanford university"], corpus)
    export_gfmrag2(index, corpus, tmp_path)
    nodes = pd.read_csv(tmp_path / "nodes.csv", keep_default_na=False, dtype=str)
    assert nodes["uid"].tolist() == [
        "3642",
        "Stanford",
        "entity:3642",
        "california",
        "stanford univ",
        "stanford university",
    ]
    edges = (tmp_path / "edges.csv").read_text().splitlines()
    assert "entity:3642,is_mentioned_in,Stanford,{}" in edges
    assert "stanford univ,is_mentioned_in,3642,{}" in edges
    _same(index, import_gfmrag2(tmp_path, corpus))


def test_gfmrag2_passages_sharing_a_title_are_one_document(tmp_path):
    corpus = Corpus([Passage.make("Same", "one"), Passage.make("Same", "two")])
    ep = sp.csr_matrix(np.array([[1, 0], [0, 1]], dtype=np.float32))
    index = KGIndex(["a", "b"], ["equivalent", "r"], np.array([[0, 1, 1]]), corpus.ids, ep)
    export_gfmrag2(index, corpus, tmp_path)
    nodes = pd.read_csv(tmp_path / "nodes.csv", keep_default_na=False)
    documents = nodes[nodes["type"] == "document"]
    assert documents["name"].tolist() == ["Same"]
    assert ast.literal_eval(documents["attributes"].iloc[0]) == {"content": "one\n\ntwo"}
    back = import_gfmrag2(tmp_path, corpus)
    assert back.entities_of_passages([corpus[0].id]) == back.entities_of_passages([corpus[1].id]) == [0, 1]


_GOOD = {
    "nodes.csv": (  # lines 1 to 6: the title "Multi\\nline" spans lines 3 and 4
        "name,type,attributes\n"
        "Doc,document,\"{'content': 'a, b'}\"\n"
        '"Multi\nline",document,{}\n'
        "a,entity,{}\n"
        "b,entity,{}\n"
    ),
    "relations.csv": "name,attributes\nr,{}\nis_mentioned_in,{}\n",
    "edges.csv": "source,relation,target,attributes\na,r,b,{}\na,is_mentioned_in,Doc,{}\n",
}


@pytest.mark.parametrize(
    ("name", "text", "where", "key"),
    [
        ("nodes.csv", "name,type\na,entity\n", "line 1", "attributes"),
        ("nodes.csv", "name,type,attributes\na,entity,{}\nb, c,entity,{}\n", "line 3", "4 fields"),
        ("nodes.csv", "name,type,attributes\na,entity,content\n", "line 2", "'content'"),
        ("nodes.csv", "name,type,attributes\na,entity,[]\n", "line 2", "'[]'"),
        ("nodes.csv", 'name,type,attributes\n"Multi\nline",fact,{}\n', "line 2", "'fact'"),
        ("nodes.csv", _GOOD["nodes.csv"] + "f,fact,{}\n", "line 7", "'fact'"),
        ("nodes.csv", _GOOD["nodes.csv"] + "a,document,{}\n", "line 7", "line 5"),
        ("relations.csv", "name,attributes\nr,{}\nr,{}\n", "line 3", "line 2"),
        ("edges.csv", _GOOD["edges.csv"] + "a,r,c,{}\n", "line 4", "target 'c'"),
        ("edges.csv", _GOOD["edges.csv"] + "a,s,b,{}\n", "line 4", "relation 's'"),
        ("edges.csv", _GOOD["edges.csv"] + "Doc,is_mentioned_in,a,{}\n", "line 4", "document 'Doc'"),
        ("edges.csv", _GOOD["edges.csv"] + "a,r,Doc,{}\n", "line 4", "-r-> document"),
    ],
)
def test_gfmrag2_bad_rows_name_file_and_line(tmp_path, name, text, where, key):
    for file, good in _GOOD.items():
        (tmp_path / file).write_text(good)
    import_gfmrag2(tmp_path, CORPUS)  # the good files read
    (tmp_path / name).write_text(text)
    with pytest.raises(DataFormatError) as info:
        import_gfmrag2(tmp_path, CORPUS)
    assert info.value.path.endswith(name)
    assert info.value.record.startswith(where)
    assert key in info.value.problem


def test_gfmrag2_missing_file(tmp_path):
    (tmp_path / "nodes.csv").write_text(_GOOD["nodes.csv"])
    with pytest.raises(DataFileNotFoundError, match="relations.csv"):
        import_gfmrag2(tmp_path, CORPUS)
