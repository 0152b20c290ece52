"""The plain format: a researcher's own passages and questions, no benchmark schema.

    passages.jsonl    {"title": str, "text": str} per line (a JSON list, or {title: text}, works too)
    docs/             a folder of text files, one passage each: title = file name without extension
    questions.jsonl   {"id", "question", "answers"?, "supporting_titles"?, "split"?} per line (optional)

Titles are identifiers: gold = the passages named in ``supporting_titles`` (:func:`load_plain` has the
rules for questions without gold and for splits).
"""

from __future__ import annotations

from pathlib import Path

from glmrag.data.formats.common import (
    CorpusBuilder,
    PathLike,
    Record,
    question_records,
    read_text,
    read_title_text_corpus,
)
from glmrag.data.types import DataFormatError, Dataset, IngestReport, QASet, Question

TEXT_SUFFIXES = (".txt", ".md", ".text")
"""Files of a passage folder that are read (others are counted as ``file_skipped``)."""
SPLIT_NAMES = ("train", "validation", "test")
_RECORD = "{id, question, answers?, supporting_titles?, split?}"


def load_plain(passages: PathLike, questions: PathLike | None = None, name: str | None = None) -> Dataset:
    """A dataset from a passage file or folder and an optional questions file (module docstring).

    A folder's files are read as UTF-8 and stripped. ``answer`` (a string) is read as well as ``answers``.
    One title with two texts is an error. A question without ``supporting_titles`` has no gold: it is
    ranked, and the evaluator leaves it out of the retrieval metrics (``question_without_gold``).
    ``hops`` = number of supporting titles. When any question names a ``split`` (train, validation,
    test), every one must, and ``dataset.splits`` keeps them.
    """
    passages = Path(passages)
    report = IngestReport(str(questions or passages))
    builder = CorpusBuilder(report, titles_are_ids=True)
    if passages.is_dir():
        _read_folder(passages, builder, report)
    else:
        read_title_text_corpus(passages, builder)
    corpus = builder.build(passages)
    qs: list[Question] = []
    splits: dict[str, str] = {}
    if questions is not None:
        qs, splits = _read_questions(questions, builder.titles, report)
    ds = Dataset(name or passages.name.split(".", 1)[0], corpus, QASet(qs), report)
    ds.splits = splits or None
    return ds


def _read_folder(folder: Path, builder: CorpusBuilder, report: IngestReport) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        if path.suffix.lower() not in TEXT_SUFFIXES:
            report.add("file_skipped", path.name)
            continue
        text = read_text(path).strip()
        if not text:
            report.add("empty_file_skipped", path.name)
            continue
        builder.add(path.stem, text, path, "file")
    if not files:
        raise DataFormatError(
            str(folder), "folder", "has no files", f"one text file ({', '.join(TEXT_SUFFIXES)}) per passage"
        )


def _read_questions(
    path: PathLike, titles: dict[str, str], report: IngestReport
) -> tuple[list[Question], dict[str, str]]:
    questions, splits = [], {}
    for rec, qid, question in question_records(path, _RECORD):
        answers = _answers(rec)
        supporting = rec.get("supporting_titles", list, "a list of corpus titles", required=False)
        gold = []
        for title in supporting or []:
            if not isinstance(title, str) or title not in titles:
                raise rec.error(
                    f"has supporting title {title!r} that is no passage title",
                    "supporting_titles that name passages (a file name without extension, for a folder)",
                )
            gold.append(titles[title])
        if not gold:
            report.add("question_without_gold", rec.label)
        split = rec.get("split", str, f"split as one of {SPLIT_NAMES}", required=False)
        if split is not None:
            if split not in SPLIT_NAMES:
                raise rec.error(f"has split {split!r}", f"one of {SPLIT_NAMES}")
            splits[qid] = split
        gold = list(dict.fromkeys(gold))
        questions.append(Question(qid, question, answers, tuple(gold), hops=len(gold) or None))
    if splits and len(splits) != len(questions):
        missing = next(q.id for q in questions if q.id not in splits)
        raise DataFormatError(
            str(path), f"question id {missing!r}", "has no split while others do", "a split on every question or none"
        )
    return questions, splits


def _answers(rec: Record) -> tuple[str, ...]:
    answers = rec.get(("answers", "answer"), list | str, "answers as a list of strings", required=False)
    answers = [answers] if isinstance(answers, str) else list(answers or [])
    if not all(isinstance(a, str) for a in answers):
        raise rec.error("has an answer that is not a string", "answers as a list of strings")
    return tuple(dict.fromkeys(answers))
