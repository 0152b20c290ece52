"""Exchange a KG index with GFM-RAG (RManLuo/gfm-rag) through its stage-1 files.

GFM-RAG's ``processed/stage1`` folder holds ``kg.txt``, one ``head,relation,tail`` triple per line
(synonym edges as relation ``equivalent``; its readers split on ``","`` and skip lines without three
parts), and ``document2entities.json``, ``{passage title: [entity phrases]}``. GFM-RAG's normalisation
removes commas, as :func:`~glmrag.index.normalize.normalize_phrase` does, so a built index's triples are
plain lines GFM-RAG reads unchanged. A phrase with a comma, a quote or a line break (an index from
elsewhere) is quoted CSV-style; our reader reads both forms, GFM-RAG's would skip such a line. Passages
sharing a title share one ``document2entities`` entry (the union of their entities), as in GFM-RAG.
These are gfmrag 1.x's files; 2.0's ``nodes.csv``, ``relations.csv`` and ``edges.csv`` are in
:mod:`glmrag.index.gfmrag2_io`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, DataFormatError, Passage
from glmrag.index.kg import SYNONYM_RELATION, KGIndex

KG_FILE = "kg.txt"
DOC2ENT_FILE = "document2entities.json"


def export_gfmrag(index: KGIndex, corpus: Corpus, folder: str | Path) -> Path:
    """Write ``kg.txt`` and ``document2entities.json`` of ``index`` into ``folder`` (created if needed).

    ``corpus`` supplies the titles of ``index.passage_ids``; every passage of the
    index must be in it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=",", quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    ents, rels = index.entities, index.relations
    writer.writerows((ents[h], rels[r], ents[t]) for h, r, t in index.triples.tolist())
    (folder / KG_FILE).write_text(buf.getvalue(), encoding="utf-8")

    documents = documents_of(index, corpus, "export_gfmrag")
    payload = {title: sorted(ents[e] for e in ids) for title, (_, ids) in documents.items()}
    (folder / DOC2ENT_FILE).write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
    return folder


def documents_of(index: KGIndex, corpus: Corpus, caller: str) -> dict[str, tuple[list[Passage], set[int]]]:
    """Title -> (the index's passages with that title, ids of the entities they mention), titles in the
    order of ``index.passage_ids``: GFM-RAG names a document by its title, so passages sharing one merge.

    Raises ``ValueError`` naming ``caller`` when a passage of the index is not in ``corpus``.
    """
    documents: dict[str, tuple[list[Passage], set[int]]] = {}
    pe = index.passage_entities
    for row, pid in enumerate(index.passage_ids):
        if pid not in corpus:
            raise ValueError(
                f"passage {pid} of the index is not in the corpus given to {caller}; "
                "pass the corpus the index was built from"
            )
        passage = corpus[corpus.position(pid)]
        passages, ids = documents.setdefault(passage.title, ([], set()))
        passages.append(passage)
        ids.update(pe.indices[pe.indptr[row] : pe.indptr[row + 1]].tolist())
    return documents


def read_kg_txt(path: str | Path) -> list[tuple[str, str, str]]:
    """The triples of a GFM-RAG ``kg.txt`` (plain or CSV-quoted lines); a line without three parts is an error."""
    triples = []
    with open(path, encoding="utf-8", newline="") as f:
        for line_no, row in enumerate(csv.reader(f, delimiter=","), start=1):
            if not row:
                continue
            if len(row) != 3 or not all(row):
                raise DataFormatError(
                    str(path),
                    f"line {line_no}",
                    f"{len(row)} comma-separated parts {row[:4]!r}",
                    'head,relation,tail with non-empty parts (quote a part that contains a comma: "a, b")',
                )
            triples.append((row[0], row[1], row[2]))
    return triples


def import_gfmrag(folder: str | Path, corpus: Corpus) -> KGIndex:
    """A :class:`KGIndex` (no embeddings, no question links) from GFM-RAG's ``kg.txt`` and ``document2entities.json``.

    Phrases are taken as written. Entities are the sorted union of triple
    endpoints and document entities, relations the sorted relations plus
    ``equivalent``, triples the sorted distinct rows. Each corpus passage gets
    the entities listed under its title. The manifest counts titles of the file
    that are not in the corpus and passages whose title is not in the file.
    """
    folder = Path(folder)
    triples = read_kg_txt(folder / KG_FILE)
    doc_path = folder / DOC2ENT_FILE
    doc2ent = json.loads(doc_path.read_text(encoding="utf-8"))
    if not isinstance(doc2ent, dict) or not all(isinstance(v, list) for v in doc2ent.values()):
        raise DataFormatError(str(doc_path), "top level", "not an object of lists", "{passage title: [entity, ...]}")

    names = {p for h, _, t in triples for p in (h, t)} | {str(e) for ents in doc2ent.values() for e in ents}
    relations = {r for _, r, _ in triples}
    source = {"format": "gfmrag", "folder": str(folder)}
    return index_from_stage1(names, relations, triples, doc2ent, corpus, source)


def index_from_stage1(
    entities: Iterable[str],
    relations: Iterable[str],
    triples: Iterable[tuple[str, str, str]],
    doc2ent: Mapping[str, Iterable[str]],
    corpus: Corpus,
    source: dict,
) -> KGIndex:
    """A :class:`KGIndex` (no embeddings, no question links) from the named parts of a GFM-RAG stage-1 graph.

    Entities are the sorted ``entities`` (which hold every triple endpoint and
    document entity), relations the sorted ``relations`` plus ``equivalent``,
    triples the sorted distinct rows. Each corpus passage gets the entities that
    ``doc2ent`` lists under its title. The manifest counts titles of ``doc2ent``
    that are not in the corpus and passages whose title is not in ``doc2ent``.
    """
    entities = sorted(set(entities))
    entity_id = {e: i for i, e in enumerate(entities)}
    relations = sorted(set(relations) | {SYNONYM_RELATION})
    relation_id = {r: i for i, r in enumerate(relations)}
    rows = sorted({(entity_id[h], relation_id[r], entity_id[t]) for h, r, t in triples})

    titles = {p.title for p in corpus}
    ent_rows, cols = [], []
    for col, passage in enumerate(corpus):
        ids = sorted({entity_id[str(e)] for e in doc2ent.get(passage.title, [])})
        ent_rows.extend(ids)
        cols.extend([col] * len(ids))
    entity_passages = sp.csr_matrix(
        (np.ones(len(ent_rows), dtype=np.float32), (ent_rows, cols)), shape=(len(entities), len(corpus))
    )
    manifest = {
        "source": source,
        "corpus_hash": corpus.content_hash(),
        "counts": {
            "entities": len(entities),
            "relations": len(relations),
            "triples": len(rows),
            "passages": len(corpus),
        },
        "import_report": {
            "titles_not_in_corpus": len(set(doc2ent) - titles),
            "passages_without_entry": sum(p.title not in doc2ent for p in corpus),
        },
    }
    return KGIndex(
        entities,
        relations,
        np.array(rows, dtype=np.int64).reshape(-1, 3),
        corpus.ids,
        entity_passages,
        manifest=manifest,
    )
