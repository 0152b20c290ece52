"""Reading and checking shared by every benchmark importer.

Every problem with an input file surfaces as a :class:`DataFormatError` that names
the file, the record (``question 17 (id '2hop__...')``, ``line 3, column 9``) and
what was expected there. Records are numbered from 1 in file order, as lines are (``question 4`` is the
fourth record; JSON Lines files skip blank lines, so it is line 4 of a file without them).

Files ending in ``.xz`` are decompressed transparently (the embedded datasets are
stored that way); all text must be UTF-8.
"""

from __future__ import annotations

import json
import lzma
import os
import re
from pathlib import Path
from typing import Any

from glmrag.data.types import Corpus, DataFormatError, IngestReport, Passage

PathLike = str | os.PathLike[str]


class DataFileNotFoundError(DataFormatError, FileNotFoundError):
    """An input file that does not exist (catchable as either parent)."""


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        keys = list(value)[:5]
        return f"an object (keys {keys})" if keys else "an empty object"
    return type(value).__name__


def read_text(path: PathLike) -> str:
    """The UTF-8 text of ``path`` (``.xz`` decompressed); a leading BOM is dropped."""
    p = Path(path)
    if p.is_dir():
        raise DataFileNotFoundError(str(p), "file", "is a folder", "a file: the one inside it that holds the records")
    if not p.is_file():
        raise DataFileNotFoundError(str(p), "file", "does not exist", "an existing file (check the path)")
    data = lzma.decompress(p.read_bytes()) if p.suffix == ".xz" else p.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataFormatError(
            str(p),
            f"byte {e.start} (line {line})",
            f"is not valid UTF-8 ({e.reason}: {data[e.start : e.end]!r})",
            "UTF-8 encoded text (re-save the file as UTF-8)",
        ) from None


def read_json(path: PathLike) -> Any:
    """The parsed JSON document in ``path``; errors name the line and column."""
    text = read_text(path)
    if not text.strip():
        raise DataFormatError(str(path), "whole file", "is empty", "a JSON document")
    try:
        return checked_json(text, path)
    except json.JSONDecodeError as e:
        raise DataFormatError(
            str(path),
            f"line {e.lineno}, column {e.colno}",
            f"is not valid JSON ({e.msg})",
            "one JSON document, or JSON Lines (one JSON object per line)",
        ) from None


_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def checked_json(text: str, path: PathLike, first_line: int = 1) -> Any:
    """``json.loads(text)``, refusing what Python's parser accepts but nothing downstream can use:
    a lone surrogate escape (``"\\ud800"``: a string that cannot be written as UTF-8) and nesting too deep
    for the parser (RecursionError). Both raise :class:`DataFormatError` naming the line."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise DataFormatError(
            str(path), f"line {first_line}", "nests JSON deeper than the parser can read", "records a few levels deep"
        ) from None
    match = _LONE_SURROGATE.search(text)
    if match:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            line = first_line + text.count("\n", 0, match.start())
            raise DataFormatError(
                str(path),
                f"line {line}",
                f"has a lone UTF-16 surrogate escape {match.group()!r} (not a character)",
                "valid Unicode text (a surrogate pair, or the character itself)",
            ) from None
    return value


def read_json_or_lines(path: PathLike) -> Any:
    """The JSON document in ``path``, or the list of its records when it is JSON Lines.

    Recognised by content, not by name: published benchmark slices often save JSON
    Lines under a ``.json`` name. A file is JSON Lines when it does not parse as one
    document but every non-blank line parses as one JSON object.
    """
    name = Path(path).name.removesuffix(".xz")
    if name.endswith(".jsonl"):
        return read_jsonl(path)
    text = read_text(path)
    try:
        return checked_json(text, path)  # the checks read_json and read_jsonl make: one reader, one set
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":
            return read_json(path)  # raises the error that names line and column
    return read_jsonl(path)


def read_jsonl(path: PathLike) -> list[Any]:
    """One parsed JSON value per non-blank line of ``path``."""
    records = []
    for n, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(checked_json(line, path, n))
        except json.JSONDecodeError as e:
            raise DataFormatError(
                str(path), f"line {n}, column {e.colno}", f"is not valid JSON ({e.msg})", "one JSON object per line"
            ) from None
    if not records:
        raise DataFormatError(str(path), "whole file", "has no records", "one JSON object per line")
    return records


def read_records(path: PathLike, expected: str) -> list[Any]:
    """The records of a question file: a JSON list, or JSON Lines (recognised by content).

    A file holding one question object (it has a ``question`` key) is JSON Lines with one record.
    """
    data = read_json_or_lines(path)
    if isinstance(data, dict) and "question" in data:
        data = [data]
    return require_list(data, path, expected)


def require_list(data: Any, path: PathLike, expected: str) -> list[Any]:
    """``data`` if it is a non-empty list, else an error about the file's top level."""
    if not isinstance(data, list):
        raise DataFormatError(str(path), "top level", f"is {json_type(data)}", f"a JSON list of {expected}")
    if not data:
        raise DataFormatError(str(path), "top level", "is an empty list", f"a JSON list of {expected}")
    return data


class Record:
    """One JSON object of a benchmark file, with field access whose errors name file and record."""

    def __init__(self, data: Any, path: PathLike, label: str, expected: str) -> None:
        self.path, self.label = str(path), label
        if not isinstance(data, dict):
            raise self.error(f"is {json_type(data)}", expected)
        self.data: dict[str, Any] = data

    def error(self, problem: str, expected: str) -> DataFormatError:
        return DataFormatError(self.path, self.label, problem, expected)

    def get(self, keys: str | tuple[str, ...], kind: type | tuple[type, ...], expected: str, required: bool = True):
        """The value of the first present key among ``keys``, checked to be of ``kind``.

        Returns ``None`` for an absent (or null) optional field. ``bool`` never passes
        for ``int``: a JSON ``true`` is not a sentence index.
        """
        keys = (keys,) if isinstance(keys, str) else keys
        key = next((k for k in keys if self.data.get(k) is not None), None)
        if key is None:
            if required:
                raise self.error(f"has no {' or '.join(map(repr, keys))}", expected)
            return None
        value = self.data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            raise self.error(f"has {key!r} as {json_type(value)}", expected)
        return value

    def text(self, key: str, expected: str) -> str:
        """A required string field that must not be blank."""
        value = self.get(key, str, expected)
        if not value.strip():
            raise self.error(f"has an empty {key!r}", expected)
        return value

    def with_id(self, keys: tuple[str, ...] = ("id", "_id")) -> str:
        """This record's question id (a string or integer), added to its label."""
        qid = str(self.get(keys, str | int, "a question id (string)"))
        self.label = f"{self.label} (id {qid!r})"
        return qid


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else getattr(kind, "__args__", (kind,))


def answers_of(rec: Record, required: bool = True, keys: tuple[str, ...] = ("answer",)) -> tuple[str, ...]:
    """Gold answer first, then ``answer_aliases``, deduplicated in order.

    The answer is the first present field of ``keys``: a string or a list of strings (the first is the
    gold one, the HippoRAG convention).
    """
    answer = rec.get(keys, str | list, "an answer (string or list of strings)", required=required)
    if answer is None:
        return ()
    aliases = rec.get("answer_aliases", list, "a list of alias strings", required=False) or []
    answers = ([answer] if isinstance(answer, str) else list(answer)) + list(aliases)
    if not all(isinstance(a, str) for a in answers):
        raise rec.error("has an answer or alias that is not a string", "answers as strings")
    if required and not answers:
        raise rec.error("has an empty answer list", "at least one answer string")
    return tuple(dict.fromkeys(answers))


def question_records(path: PathLike, record: str, id_keys: tuple[str, ...] = ("id", "_id")):
    """Yield ``(rec, id, question)`` for each record of a question file, ids checked unique, questions non-empty."""
    ids = QuestionIds()
    for i, raw in enumerate(read_records(path, f"question objects {record}"), start=1):
        rec = Record(raw, path, f"question {i}", f"a question object {record}")
        qid = rec.with_id(id_keys)
        ids.check(qid, rec)
        yield rec, qid, rec.text("question", "a non-empty question string")


class QuestionIds:
    """Rejects a question id seen before, naming both records."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def check(self, qid: str, rec: Record) -> None:
        if qid in self._seen:
            raise rec.error(f"repeats the id of {self._seen[qid]}", "a unique id per question")
        self._seen[qid] = rec.label


class CorpusBuilder:
    """Collects passages in first-seen order, merging exact (title, text) duplicates.

    Duplicates are counted in the report as ``duplicate_passage``. Where a format
    names gold passages by title (``titles_are_ids``), one title carrying two
    different texts is an error: the gold would be ambiguous.
    """

    def __init__(self, report: IngestReport, titles_are_ids: bool) -> None:
        self.report, self.titles_are_ids = report, titles_are_ids
        self._passages: dict[str, Passage] = {}
        self._title: dict[str, tuple[str, str]] = {}  # title -> (passage id, where first seen)

    def add(self, title: str, text: str, path: PathLike, where: str) -> str:
        """Add a passage (or find its exact duplicate) and return its id; one with neither title nor text is
        counted as ``empty_passage`` (it can be gold, so it is kept)."""
        if not title.strip() and not text.strip():
            self.report.add("empty_passage", f"({where}) has an empty title and text")
        passage = Passage.make(title, text)
        if passage.id in self._passages:
            self.report.add("duplicate_passage", f"{title!r} ({where})")
            return passage.id
        first = self._title.get(title)
        if first is not None and self.titles_are_ids:
            raise DataFormatError(
                str(path),
                where,
                f"gives title {title!r} a different text than {first[1]}",
                "one text per title, since this format names gold passages by title",
            )
        self._passages[passage.id] = passage
        self._title.setdefault(title, (passage.id, where))
        return passage.id

    def by_title(self, title: str) -> str | None:
        """The id of the first passage with this title, if any."""
        first = self._title.get(title)
        return first[0] if first else None

    @property
    def titles(self) -> dict[str, str]:
        return {t: pid for t, (pid, _) in self._title.items()}

    def __contains__(self, pid: str) -> bool:
        return pid in self._passages

    def build(self, path: PathLike) -> Corpus:
        if not self._passages:
            raise DataFormatError(str(path), "corpus", "has no passages", "at least one {title, text} passage")
        return Corpus(list(self._passages.values()))


def join_sentences(sentences: list[str]) -> str:
    """One paragraph from its sentences: one space between two sentences unless the next begins with one.

    HotpotQA keeps each sentence's leading space, so this restores its paragraph;
    2WikiMultihopQA's and older HippoRAG corpora's sentences have none.
    """
    parts = []
    for i, s in enumerate(sentences):
        parts.append(s if i == 0 or s[:1].isspace() else " " + s)
    return "".join(parts)


_CORPUS = "{title, text} passages, or an object {title: text or [sentence, ...]}"


def _passage_text(value: Any, path: PathLike, where: str) -> str:
    """A passage's text: a string, or a list of sentence strings joined by :func:`join_sentences`."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return join_sentences(value)
    raise DataFormatError(str(path), where, f"has a text that is {json_type(value)}", "a string or a list of sentences")


def read_title_text_corpus(path: PathLike, builder: CorpusBuilder, data: Any = None) -> None:
    """Add every passage of a corpus file (or its parsed ``data``) to ``builder``.

    Accepted shapes: a list (JSON or JSON Lines) of ``{title, text}`` (or
    ``paragraph_text`` / ``sentences``), and an object ``{title: text}`` or
    ``{title: [sentence, ...]}`` (older HippoRAG releases). Lists of sentences are
    joined by :func:`join_sentences`.
    """
    data = read_json_or_lines(path) if data is None else data
    if isinstance(data, dict):
        if not data:
            raise DataFormatError(str(path), "corpus", "has no passages", _CORPUS)
        for title, value in data.items():
            where = f"passage {title!r}"
            builder.add(title, _passage_text(value, path, where), path, where)
        return
    for i, raw in enumerate(require_list(data, path, _CORPUS), start=1):
        rec = Record(raw, path, f"passage {i}", "a {title, text} passage")
        title = rec.get("title", str, "a title string")
        value = rec.get(("text", "paragraph_text", "sentences"), str | list, "a text string or a list of sentences")
        builder.add(title, _passage_text(value, path, rec.label), path, rec.label)
