"""Question files whose records carry their own paragraphs: HippoRAG and MuSiQue.

Both share one record shape (the official MuSiQue schema, which HippoRAG reuses)::

    {"id" | "_id": str, "question": str, "answer": str | [str], "answer_aliases": [str]?,
     "answerable": bool?, "question_decomposition": [{"question": str, ...}]?,
     "paragraphs": [{"title": str, "paragraph_text" | "text": str, "is_supporting": bool}]}

* :func:`load_hipporag` reads such questions plus a separate ``[{title, text}]``
  corpus (HippoRAG's ``<name>.json`` + ``<name>_corpus.json``). A supporting
  paragraph must appear verbatim (same title *and* text) in the corpus: titles are
  not identifiers here (the MuSiQue corpus has 85 titles shared by different texts).
* :func:`load_musique` reads the official MuSiQue files (JSON list or ``.jsonl``),
  whose corpus is the union of all paragraphs in first-seen order.

Hops follow MuSiQue's id prefix (``2hop__``, ``3hop1__``, ``4hop3__``), else the
length of ``question_decomposition``, else the number of supporting paragraphs; the
question ``type`` is that id prefix (MuSiQue's composition shape) when present.
Unanswerable MuSiQue questions (``answerable: false``) are dropped and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from glmrag.data.formats.common import (
    CorpusBuilder,
    PathLike,
    QuestionIds,
    Record,
    answers_of,
    read_records,
    read_title_text_corpus,
)
from glmrag.data.types import Dataset, IngestReport, Passage, QASet, Question

_RECORD = "a question object {id, question, answer, paragraphs}"
_PARAGRAPHS = "a list of {title, paragraph_text, is_supporting}"
_HOP_PREFIX = re.compile(r"^(([2-9])hop\d*)__")


@dataclass
class _Parsed:
    """A question record before its paragraphs are resolved to passage ids."""

    rec: Record
    qid: str
    question: str
    answers: tuple[str, ...]
    decomposition: tuple[str, ...] | None
    paragraphs: list[tuple[str, str, bool, str]]  # (title, text, is_supporting, where)


def load_hipporag(questions_path: PathLike, corpus_path: PathLike, name: str | None = None) -> Dataset:
    """A dataset from a HippoRAG question file and its ``[{title, text}]`` corpus.

    Promises: the corpus is the corpus file in order (exact duplicates merged and
    counted); every question's ``supporting`` lists the ids of its ``is_supporting``
    paragraphs, each found in the corpus (else :class:`DataFormatError`). Paragraphs
    that are not supporting and not in the corpus are counted as
    ``paragraph_not_in_corpus``.
    """
    report = IngestReport(str(questions_path))
    builder = CorpusBuilder(report, titles_are_ids=False)
    read_title_text_corpus(corpus_path, builder)
    questions = []
    for q in _parse_questions(questions_path, report):
        supporting = []
        for title, text, is_supporting, where in q.paragraphs:
            pid = Passage.make(title, text).id
            if pid in builder:
                if is_supporting:
                    supporting.append(pid)
            elif is_supporting:
                raise q.rec.error(
                    f"has supporting {where} {title!r} that is not in {Path(corpus_path).name} "
                    "(no passage with that title and text)",
                    "every is_supporting paragraph to appear verbatim in the corpus file",
                )
            else:
                report.add("paragraph_not_in_corpus", f"{title!r} ({q.rec.label})")
        questions.append(_question(q, supporting))
    return Dataset(name or _stem(questions_path), builder.build(corpus_path), QASet(questions), report)


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
        questions.append(_question(q, gold))
    return Dataset(name or _stem(path), builder.build(path), QASet(questions), report)


def _parse_questions(path: PathLike, report: IngestReport) -> list[_Parsed]:
    """Checked question records of ``path``, unanswerable ones dropped and counted."""
    ids = QuestionIds()
    parsed = []
    for i, raw in enumerate(read_records(path, "question objects {id, question, answer, paragraphs}")):
        rec = Record(raw, path, f"question {i}", _RECORD)
        qid = rec.with_id()
        ids.check(qid, rec)
        question = rec.text("question", "a non-empty question string")
        if rec.get("answerable", bool, "answerable as true/false", required=False) is False:
            report.add("unanswerable_dropped", qid)
            continue
        paragraphs = _paragraphs(rec)
        if not any(is_sup for _, _, is_sup, _ in paragraphs):
            raise rec.error("has no paragraph with is_supporting true", "at least one supporting paragraph")
        parsed.append(_Parsed(rec, qid, question, answers_of(rec), _decomposition(rec), paragraphs))
    return parsed


def _paragraphs(rec: Record) -> list[tuple[str, str, bool, str]]:
    paragraphs = rec.get("paragraphs", list, _PARAGRAPHS)
    if not paragraphs:
        raise rec.error("has an empty 'paragraphs' list", _PARAGRAPHS)
    out = []
    for j, raw in enumerate(paragraphs):
        p = Record(raw, rec.path, f"{rec.label} paragraph {j}", "a {title, paragraph_text, is_supporting} object")
        title = p.get("title", str, "a title string")
        text = p.get(("paragraph_text", "text"), str, "the paragraph text as a string")
        is_supporting = p.get("is_supporting", bool, "is_supporting as true/false")
        out.append((title, text, is_supporting, f"paragraph {j}"))
    return out


def _decomposition(rec: Record) -> tuple[str, ...] | None:
    steps = rec.get("question_decomposition", list, "a list of {question, answer} steps", required=False)
    if not steps:
        return None
    out = []
    for j, raw in enumerate(steps):
        step = Record(raw, rec.path, f"{rec.label} decomposition step {j}", "a {question, answer} object")
        out.append(step.get("question", str, "a sub-question string"))
    return tuple(out)


def _question(q: _Parsed, supporting: list[str]) -> Question:
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


def _stem(path: PathLike) -> str:
    name = Path(path).name.removesuffix(".xz")
    return name.split(".", 1)[0]
