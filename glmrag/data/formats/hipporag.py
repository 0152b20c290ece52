"""HippoRAG's released layout: ``<name>.json`` questions and a separate ``<name>_corpus.json``.

The corpus is ``[{title, text}]`` or ``{title: text or [sentence, ...]}``. Each question record takes one
of the shapes HippoRAG's ``main.py`` reads: MuSiQue-shaped ``paragraphs`` (or ``contexts``)
``[{title, paragraph_text | text, is_supporting}]``, gold found verbatim (title and text) in the corpus;
HotpotQA-shaped ``supporting_facts`` + ``context`` (``hotpotqa.json``, ``2wikimultihopqa.json``), gold =
the corpus passage of each supporting title; or neither, kept without gold (``question_without_gold``).
Ids are ``id`` or ``_id``; a record without one (``sample.json``) takes its index (counted).
"""

from __future__ import annotations

from pathlib import Path

from glmrag.data.formats.common import (
    CorpusBuilder,
    PathLike,
    QuestionIds,
    Record,
    answers_of,
    join_sentences,
    read_records,
    read_title_text_corpus,
)
from glmrag.data.formats.contexts import read_facts
from glmrag.data.formats.paragraphs import Parsed, file_stem, musique_question, read_decomposition, read_paragraphs
from glmrag.data.types import Corpus, Dataset, IngestReport, Passage, QASet, Question

_RECORD = "a question object {id, question, answer, paragraphs} or {_id, question, answer, supporting_facts, context}"
_ANSWER_KEYS = ("answer", "gold_ans", "reference")
"""Answer fields in the order HippoRAG's ``get_gold_answers`` reads them."""
_CONTEXT = "a list of [title, [sentence, ...]] pairs"


def load_hipporag(questions_path: PathLike, corpus_path: PathLike, name: str | None = None) -> Dataset:
    """A dataset from a HippoRAG question file and its corpus file (module docstring for the shapes).

    Promises: the corpus is the corpus file in order (exact duplicates merged and counted); every gold
    passage is in it, else :class:`DataFormatError` naming the question. Paragraphs or context titles
    that are not gold and not in the corpus are counted as ``paragraph_not_in_corpus``.
    """
    report = IngestReport(str(questions_path))
    builder = CorpusBuilder(report, titles_are_ids=False)
    read_title_text_corpus(corpus_path, builder)
    corpus = builder.build(corpus_path)
    by_title: dict[str, list[Passage]] = {}
    for passage in corpus:
        by_title.setdefault(passage.title, []).append(passage)
    corpus_name = Path(corpus_path).name
    ids = QuestionIds()
    questions = []
    for i, raw in enumerate(read_records(questions_path, "question objects {id, question, answer, ...}"), start=1):
        rec = Record(raw, questions_path, f"question {i}", _RECORD)
        qid = _question_id(rec, i - 1, report)
        ids.check(qid, rec)
        question = rec.text("question", "a non-empty question string")
        if rec.get("answerable", bool, "answerable as true/false", required=False) is False:
            report.add("unanswerable_dropped", qid)
            continue
        answers = answers_of(rec, keys=_ANSWER_KEYS)
        if rec.data.get("paragraphs") is not None or rec.data.get("contexts") is not None:
            paragraphs = read_paragraphs(rec, ("paragraphs", "contexts"))
            parsed = Parsed(rec, qid, question, answers, read_decomposition(rec), paragraphs)
            questions.append(musique_question(parsed, _paragraph_gold(parsed, corpus, corpus_name, report)))
        elif rec.data.get("supporting_facts") is not None:
            gold = _title_gold(rec, by_title, corpus_name, report)
            kind = rec.get("type", str, "type as a string", required=False)
            questions.append(Question(qid, question, answers, tuple(gold), hops=len(gold), type=kind))
        else:
            report.add("question_without_gold", rec.label)
            questions.append(Question(qid, question, answers, ()))
    return Dataset(name or file_stem(questions_path), corpus, QASet(questions), report)


def _question_id(rec: Record, position: int, report: IngestReport) -> str:
    """``id`` or ``_id``; a record without either gets id ``position`` (its place in the file from 0, as
    HippoRAG numbers them; counted in the report)."""
    if rec.data.get("id") is None and rec.data.get("_id") is None:
        report.add("question_without_id", rec.label)
        rec.label = f"{rec.label} (id '{position}')"
        return str(position)
    return rec.with_id()


def _paragraph_gold(q: Parsed, corpus: Corpus, corpus_name: str, report: IngestReport) -> list[str]:
    """Ids of the supporting paragraphs, each found verbatim in the corpus."""
    if not any(is_sup for _, _, is_sup, _ in q.paragraphs):
        raise q.rec.error("has no paragraph with is_supporting true", "at least one supporting paragraph")
    supporting = []
    for title, text, is_supporting, where in q.paragraphs:
        pid = Passage.make(title, text).id
        if pid in corpus:
            if is_supporting:
                supporting.append(pid)
        elif is_supporting:
            raise q.rec.error(
                f"has supporting {where} {title!r} that is not in {corpus_name} (no passage with that title and text)",
                "every is_supporting paragraph to appear verbatim in the corpus file",
            )
        else:
            report.add("paragraph_not_in_corpus", f"{title!r} ({q.rec.label})")
    return supporting


def _title_gold(rec: Record, by_title: dict[str, list[Passage]], corpus_name: str, report: IngestReport) -> list[str]:
    """Ids of the corpus passages of the distinct ``supporting_facts`` titles.

    A title shared by several corpus passages is settled by the record's own ``context`` paragraph (its
    sentences joined with no space, one space, or :func:`join_sentences`, as HippoRAG's corpora differ).
    """
    facts = read_facts(rec) or []
    context = _context(rec)
    for title in context:
        if title not in by_title:
            report.add("paragraph_not_in_corpus", f"{title!r} ({rec.label})")
    gold: list[str] = []
    for title, _ in facts:
        found = by_title.get(title, [])
        if not found:
            raise rec.error(
                f"has supporting title {title!r} that is not in {corpus_name}",
                "supporting_facts titles that name a corpus passage",
            )
        if len(found) > 1 and title in context:
            sentences = context[title]
            texts = {"".join(sentences), " ".join(sentences), join_sentences(sentences)}
            found = [p for p in found if p.text in texts] or found
        if len(found) > 1:
            raise rec.error(
                f"has supporting title {title!r} shared by {len(found)} passages of {corpus_name}",
                "a context paragraph whose text is one of theirs",
            )
        if found[0].id not in gold:
            gold.append(found[0].id)
    return gold


def _context(rec: Record) -> dict[str, list[str]]:
    """The record's ``context`` as title -> sentences (empty when absent)."""
    out: dict[str, list[str]] = {}
    for j, pair in enumerate(rec.get("context", list, _CONTEXT, required=False) or [], start=1):
        ok = isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], list)
        if not ok or not all(isinstance(s, str) for s in pair[1]):
            raise rec.error(f"has context {j} = {str(pair)[:80]}", _CONTEXT)
        out[pair[0]] = pair[1]
    return out
