"""Exchange a KG index with GFM-RAG 2.0 (gfmrag 2.0.0) through its stage-1 graph files.

gfmrag 2.0's ``processed/stage1`` folder holds three CSV files, written by ``GraphIndexer.index_data``
(pandas ``DataFrame.to_csv(index=False)`` of the node, relation and edge dicts of
``KGConstructor.build_graph``) and read by ``GraphIndexDataset.process_graph``
(pandas ``read_csv(keep_default_na=False)``)::

    nodes.csv      name,type,attributes               (a uid column may follow)
    relations.csv  name,attributes                    (a uid column may follow)
    edges.csv      source,relation,target,attributes

A node or relation is keyed by its ``uid`` where the file has that column, else by its ``name``, so keys
are unique; an edge names its nodes and relation by key. ``attributes`` is a Python dict literal, as
``str(dict)`` writes it (GFM-RAG parses it with ``ast.literal_eval``). The dialect is pandas' default:
commas, a field quoted with ``"`` only when it holds a comma, a quote or a line break, ``""`` for a quote
inside one, ``\\n`` line ends.

GFM-RAG's KG constructor writes two node types: ``entity`` (an OpenIE phrase, attributes ``{}``) and
``document`` (a passage: its title as name, attributes ``{'content': text}``). Edges between entities are
the KG triples, synonym edges among them as relation ``equivalent``; a mention of an entity in a passage is
an edge ``entity,is_mentioned_in,document``, and ``is_mentioned_in`` is listed in relations.csv.

Export writes what that constructor writes: document nodes first, one per title (passages sharing a title
merge, as in :mod:`glmrag.index.gfmrag_io`: their texts joined by a blank line, their entities united), then
the entities. An entity phrase equal to a title would be one node to GFM-RAG (its constructor merges the
two), so then the files get a uid column: each node's uid is its name, and such an entity's is
``entity:<phrase>``.

Import keeps entity and document nodes, triples and mentions; attributes are checked but not kept (a
:class:`KGIndex` has no place for them), and nodes sharing a name (possible with uids) are one entity or
one title. It is stricter than GFM-RAG's loader: an edge naming a missing node or relation is an error
(GFM-RAG skips it with a warning), and so are other node types and edges of a document other than mentions.
"""

from __future__ import annotations

import ast
import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from glmrag.data.formats.common import DataFileNotFoundError
from glmrag.data.types import Corpus, DataFormatError
from glmrag.index.gfmrag_io import documents_of, index_from_stage1
from glmrag.index.kg import KGIndex

NODES_FILE = "nodes.csv"
RELATIONS_FILE = "relations.csv"
EDGES_FILE = "edges.csv"
ENTITY = "entity"
DOCUMENT = "document"
MENTION_RELATION = "is_mentioned_in"
"""GFM-RAG's relation from an entity to a document that mentions it (``KGConstructor.build_graph``)."""

NODE_COLUMNS = ("name", "type", "attributes")
RELATION_COLUMNS = ("name", "attributes")
EDGE_COLUMNS = ("source", "relation", "target", "attributes")
_ATTRIBUTES = "a Python dict literal such as {} or {'content': 'text'} (GFM-RAG reads it with ast.literal_eval)"


@dataclass
class Stage1Graph:
    """What a :class:`KGIndex` keeps of GFM-RAG 2.0's stage-1 graph, by name."""

    entities: set[str] = field(default_factory=set)
    """Names of the entity nodes."""
    relations: set[str] = field(default_factory=set)
    """Relation names, without ``is_mentioned_in`` unless it joins two entities."""
    triples: list[tuple[str, str, str]] = field(default_factory=list)
    """``(head, relation, tail)`` names of the edges between two entities, in file order."""
    documents: dict[str, set[str]] = field(default_factory=dict)
    """Title of each document node -> names of the entities mentioned in it."""


def export_gfmrag2(index: KGIndex, corpus: Corpus, folder: str | Path) -> Path:
    """Write ``nodes.csv``, ``relations.csv`` and ``edges.csv`` of ``index`` into ``folder`` (created if needed).

    ``corpus`` supplies the titles and texts of ``index.passage_ids``; every passage of the index must be in it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    documents = documents_of(index, corpus, "export_gfmrag2")
    with_uid = not documents.keys().isdisjoint(index.entities)
    keys = [f"entity:{e}" if e in documents else e for e in index.entities]
    if with_uid and len(set(keys) | set(documents)) < len(keys) + len(documents):
        raise ValueError("export_gfmrag2: an entity's uid entity:<phrase> equals a title; rename that passage")

    nodes = [
        [title, DOCUMENT, repr({"content": "\n\n".join(p.text for p in passages)}), title]
        for title, (passages, _) in documents.items()
    ]
    nodes += [[name, ENTITY, "{}", key] for name, key in zip(index.entities, keys, strict=True)]
    header = [*NODE_COLUMNS, "uid"] if with_uid else list(NODE_COLUMNS)
    _write_csv(folder / NODES_FILE, header, [row[: len(header)] for row in nodes])

    relations = [*index.relations, *([] if MENTION_RELATION in index.relations else [MENTION_RELATION])]
    _write_csv(folder / RELATIONS_FILE, RELATION_COLUMNS, [[r, "{}"] for r in relations])

    rels = index.relations
    edges = [[keys[h], rels[r], keys[t], "{}"] for h, r, t in index.triples.tolist()]
    edges += [[keys[e], MENTION_RELATION, title, "{}"] for title, (_, ids) in documents.items() for e in sorted(ids)]
    _write_csv(folder / EDGES_FILE, EDGE_COLUMNS, edges)
    return folder


def import_gfmrag2(folder: str | Path, corpus: Corpus) -> KGIndex:
    """A :class:`KGIndex` (no embeddings, no question links) from GFM-RAG 2.0's three stage-1 files in ``folder``.

    Entities are the sorted entity names, relations the sorted relation names plus ``equivalent`` (without
    ``is_mentioned_in`` unless it joins two entities), triples the sorted distinct entity-entity edges. Each
    corpus passage gets the entities that mention the document node of its title. The manifest counts
    document titles that are not in the corpus and passages whose title has no document node.
    """
    graph = read_stage1_graph(folder)
    source = {"format": "gfmrag2", "folder": str(folder)}
    return index_from_stage1(graph.entities, graph.relations, graph.triples, graph.documents, corpus, source)


def read_stage1_graph(folder: str | Path) -> Stage1Graph:
    """The graph of ``nodes.csv``, ``relations.csv`` and ``edges.csv`` in ``folder``; a bad row is a
    :class:`DataFormatError` naming the file and the line the row starts on."""
    folder = Path(folder)
    graph = Stage1Graph()
    path = folder / NODES_FILE
    nodes: dict[str, tuple[str, str]] = {}  # key -> (type, name)
    for line, row in _keyed_rows(path, NODE_COLUMNS):
        if row["type"] == ENTITY:
            graph.entities.add(row["name"])
        elif row["type"] == DOCUMENT:
            graph.documents.setdefault(row["name"], set())
        else:
            raise DataFormatError(
                str(path), f"line {line}", f"node type {row['type']!r}", "entity or document: an index holds no other"
            )
        nodes[row["key"]] = (row["type"], row["name"])

    relations = {row["key"]: row["name"] for _, row in _keyed_rows(folder / RELATIONS_FILE, RELATION_COLUMNS)}
    graph.relations = set(relations.values()) - {MENTION_RELATION}

    path = folder / EDGES_FILE
    for line, row in _rows(path, EDGE_COLUMNS):
        for column, known, which in (
            ("source", nodes, NODES_FILE),
            ("relation", relations, RELATIONS_FILE),
            ("target", nodes, NODES_FILE),
        ):
            if row[column] not in known:
                raise DataFormatError(
                    str(path),
                    f"line {line}",
                    f"{column} {row[column]!r} is not in {which}",
                    f"a uid of {which} (its name where {which} has no uid column)",
                )
        (head_type, head), (tail_type, tail) = nodes[row["source"]], nodes[row["target"]]
        relation = relations[row["relation"]]
        if head_type == ENTITY and tail_type == ENTITY:
            graph.triples.append((head, relation, tail))
            graph.relations.add(relation)
        elif head_type == ENTITY and relation == MENTION_RELATION:
            graph.documents[tail].add(head)
        else:
            raise DataFormatError(
                str(path),
                f"line {line}",
                f"edge {head_type} {head!r} -{relation}-> {tail_type} {tail!r}",
                f"entity,{MENTION_RELATION},document for a mention; every other edge joins two entities",
            )
    return graph


def _keyed_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a node or relation file, each with its ``key`` (uid, else name), keys unique."""
    first_line: dict[str, int] = {}
    for line, row in _rows(path, columns):
        row["key"] = row.get("uid", row["name"])
        if row["key"] in first_line:
            raise DataFormatError(
                str(path),
                f"line {line}",
                f"repeats the key {row['key']!r} of line {first_line[row['key']]}",
                "unique names, or a uid column with a unique uid per row",
            )
        first_line[row["key"]] = line
        yield line, row


def _rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line the record starts on, {column: field}) of each non-blank record after the header of ``path``,
    its ``attributes`` checked to be a dict literal."""
    if not path.is_file():
        raise DataFileNotFoundError(
            str(path), "file", "does not exist", "a stage-1 folder holding nodes.csv, relations.csv and edges.csv"
        )
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        missing = [c for c in columns if c not in header]
        if missing:
            raise DataFormatError(
                str(path),
                "line 1 (header)",
                f"has no column {', '.join(missing)}",
                f"a header with {','.join(columns)}",
            )
        end = reader.line_num
        for fields in reader:
            line, end = end + 1, reader.line_num
            if not fields:
                continue
            if len(fields) != len(header):
                raise DataFormatError(
                    str(path),
                    f"line {line}",
                    f"{len(fields)} fields",
                    f"{len(header)} as in the header ({','.join(header)}); quote a field that holds a comma",
                )
            row = dict(zip(header, fields, strict=True))
            _check_attributes(path, line, row["attributes"])
            yield line, row


def _check_attributes(path: Path, line: int, text: str) -> None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise DataFormatError(str(path), f"line {line}", f"attributes {text[:80]!r}", _ATTRIBUTES)


def _write_csv(path: Path, header: Sequence[str], rows: list[list[str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
