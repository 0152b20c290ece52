"""Official MuSiQue question files, whose records carry their own paragraphs::

    {"id" | "_id": str, "question": str, "answer": str | [str], "answer_aliases": [str]?,
     "answerable": bool?, "question_decomposition": [{"question": str, ...}]?,
     "paragraphs": [{"title": str, "paragraph_text" | "text": str, "is_supporting": bool}]}

The corpus is the union of all paragraphs in first-seen order; gold = the ``is_supporting`` ones.
Unanswerable questions (``answerable: false``) are dropped and counted. Hops follow the id prefix
(``2hop__``, ``3hop1__``), else the decomposition's length, else the number of supporting paragraphs;
``type`` is that prefix. HippoRAG reuses this record shape (:mod:`glmrag.data.formats.hipporag`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from glmrag.data.formats.common import CorpusBuilder, PathLike, QuestionIds, Record, answers_of, read_records
from glmrag.data.types import Dataset, IngestReport, QASet, Question

_RECORD = "a question object {id, question, answer, paragraphs}"
_PARAGRAPHS = "a list of {title, paragraph_text, is_supporting}"
_HOP_PREFIX = re.compile(r"^(([2-9])hop\d*)__")


@dataclass
class Parsed:
    """A question record before its paragraphs are resolved to passage ids."""

    rec: Record
    qid: str
    question: str
    answers: tuple[str, ...]
    decomposition: tuple[str, ...] | None
    paragraphs: list[tuple[str, str, bool, str]]  # (title, text, is_supporting, where)


def load_musique(path: PathLike, name: str | None = None) -> Dataset:
    """A dataset from an official MuSiQue file; the corpus is the union of its paragraphs.

    Promises: passages in first-seen order, exact (title, text) duplicates merged and
    counted as ``duplicate_passage``; ``supporting`` = ids of ``is_supporting``
    paragraphs.
    """
    report = IngestReport(str(path))
    builder = CorpusBuilder(report, titles_are_ids=False)
    questions = []
    for q in _parse_questions(path, report):
        pids = [builder.add(title, text, path, f"{q.rec.label} {where}") for title, text, _, where in q.paragraphs]
        gold = [pid for pid, (_, _, is_sup, _) in zip(pids, q.paragraphs, strict=True) if is_sup]
        questions.append(musique_question(q, gold))
    return Dataset(name or file_stem(path), builder.build(path), QASet(questions), report)


def _parse_questions(path: PathLike, report: IngestReport) -> list[Parsed]:
    """Checked question records of ``path``, unanswerable ones dropped and counted."""
    ids = QuestionIds()
    parsed = []
    for i, raw in enumerate(read_records(path, "question objects {id, question, answer, paragraphs}"), start=1):
        rec = Record(raw, path, f"question {i}", _RECORD)
        qid = rec.with_id()
        ids.check(qid, rec)
        question = rec.text("question", "a non-empty question string")
        if rec.get("answerable", bool, "answerable as true/false", required=False) is False:
            report.add("unanswerable_dropped", qid)
            continue
        paragraphs = read_paragraphs(rec)
        if not any(is_sup for _, _, is_sup, _ in paragraphs):
            raise rec.error("has no paragraph with is_supporting true", "at least one supporting paragraph")
        parsed.append(Parsed(rec, qid, question, answers_of(rec), read_decomposition(rec), paragraphs))
    return parsed


def read_paragraphs(rec: Record, keys: tuple[str, ...] = ("paragraphs",)) -> list[tuple[str, str, bool, str]]:
    """The record's ``(title, text, is_supporting, where)`` paragraphs, from the first present key of ``keys``."""
    paragraphs = rec.get(keys, list, _PARAGRAPHS)
    if not paragraphs:
        raise rec.error(f"has an empty {keys[0]!r} list", _PARAGRAPHS)
    out = []
    for j, raw in enumerate(paragraphs, start=1):
        p = Record(raw, rec.path, f"{rec.label} paragraph {j}", "a {title, paragraph_text, is_supporting} object")
        title = p.get("title", str, "a title string")
        text = p.get(("paragraph_text", "text"), str, "the paragraph text as a string")
        is_supporting = p.get("is_supporting", bool, "is_supporting as true/false")
        out.append((title, text, is_supporting, f"paragraph {j}"))
    return out


def read_decomposition(rec: Record) -> tuple[str, ...] | None:
    steps = rec.get("question_decomposition", list, "a list of {question, answer} steps", required=False)
    if not steps:
        return None
    out = []
    for j, raw in enumerate(steps, start=1):
        step = Record(raw, rec.path, f"{rec.label} decomposition step {j}", "a {question, answer} object")
        out.append(step.get("question", str, "a sub-question string"))
    return tuple(out)


def musique_question(q: Parsed, supporting: list[str]) -> Question:
    match = _HOP_PREFIX.match(q.qid)
    if match:
        hops = int(match.group(2))
    elif q.decomposition:
        hops = len(q.decomposition)
    else:
        hops = len(supporting)
    return Question(
        id=q.qid,
        question=q.question,
        answers=q.answers,
        supporting=tuple(dict.fromkeys(supporting)),
        hops=hops,
        type=match.group(1) if match else None,
        decomposition=q.decomposition,
    )


def file_stem(path: PathLike) -> str:
    name = Path(path).name.removesuffix(".xz")
    return name.split(".", 1)[0]
