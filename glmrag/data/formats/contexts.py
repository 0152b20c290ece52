"""Question files with sentence-split contexts: official HotpotQA and 2WikiMultihopQA.

Record shape (2WikiMultihopQA adds ``evidences`` and more; ignored here)::

    {"_id" | "id": str, "question": str, "answer": str, "type": str?,
     "context": [[title, [sentence, ...]], ...], "supporting_facts": [[title, sentence_index], ...]}

The corpus is the union of all contexts, each paragraph's sentences joined by :func:`join_sentences`;
titles are identifiers (gold is given by title). Gold = the distinct ``supporting_facts`` titles
(:func:`_resolve` has the rules); ``hops`` = their number; ``type`` = the record's ``type``.
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
)
from glmrag.data.types import Dataset, IngestReport, QASet, Question

_RECORD = "a question object {_id, question, answer, context, supporting_facts}"
_CONTEXT = "a list of [title, [sentence, ...]] pairs"
_FACTS = "a non-empty list of [title, sentence_index] pairs"


def load_hotpotqa(path: PathLike, name: str | None = None) -> Dataset:
    """A dataset from an official HotpotQA file (e.g. ``hotpot_dev_distractor_v1.json``)."""
    return _load_contexts(path, name)


def load_2wiki(path: PathLike, name: str | None = None) -> Dataset:
    """A dataset from an official 2WikiMultihopQA file (JSON list, or ``.jsonl``).

    Its sentences carry no leading space, so :func:`join_sentences` adds one: the passages then equal
    HippoRAG's ``2wikimultihopqa_corpus.json`` (all 3,029 paragraphs shared with ``2wiki-dev-200`` match
    byte for byte).
    """
    return _load_contexts(path, name)


def _load_contexts(path: PathLike, name: str | None) -> Dataset:
    """Two passes: the corpus from every context first, so that gold can resolve across questions.

    Exact duplicate paragraphs are merged and counted (``duplicate_passage``); one title with two
    different texts is a :class:`DataFormatError`.
    """
    report = IngestReport(str(path))
    builder = CorpusBuilder(report, titles_are_ids=True)
    ids = QuestionIds()
    parsed = []
    for i, raw in enumerate(read_records(path, "question objects {_id, question, answer, context, ...}"), start=1):
        rec = Record(raw, path, f"question {i}", _RECORD)
        qid = rec.with_id(("_id", "id"))
        ids.check(qid, rec)
        question = rec.text("question", "a non-empty question string")
        answers = answers_of(rec, required=False)  # official test files carry no answer
        context = _read_context(rec, builder)
        facts = read_facts(rec)
        parsed.append((rec, qid, question, answers, context, facts))

    titles = builder.titles
    questions = []
    for rec, qid, question, answers, context, facts in parsed:
        gold = _resolve(rec, context, facts, titles, report)
        if gold is None:
            continue
        questions.append(
            Question(
                qid,
                question,
                answers,
                tuple(gold),
                hops=len(gold) or None,
                type=rec.get("type", str, "type as a string", required=False),
            )
        )
    return Dataset(name or Path(path).name.split(".", 1)[0], builder.build(path), QASet(questions), report)


def _read_context(rec: Record, builder: CorpusBuilder) -> dict[str, tuple[str, int]]:
    """Add the record's paragraphs to the corpus; return title -> (passage id, #sentences)."""
    context = rec.get("context", list, _CONTEXT, required=False) or []
    out = {}
    for j, pair in enumerate(context, start=1):
        where = f"{rec.label} context {j}"
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], list)):
            raise rec.error(f"has context {j} = {str(pair)[:80]}", _CONTEXT)
        title, sentences = pair
        if not all(isinstance(s, str) for s in sentences):
            raise rec.error(f"has a non-string sentence in context {j} ({title!r})", "sentences as strings")
        out[title] = (builder.add(title, join_sentences(sentences), rec.path, where), len(sentences))
    return out


def read_facts(rec: Record) -> list[tuple[str, int]] | None:
    """The record's ``[title, sentence_index]`` pairs; ``None`` when it has none (an unlabelled test file)."""
    facts = rec.get("supporting_facts", list, _FACTS, required=False)
    if facts is None:
        return None
    if not facts:
        raise rec.error("has an empty 'supporting_facts' list", _FACTS)
    out = []
    for j, fact in enumerate(facts, start=1):
        ok = isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)
        if not ok or not isinstance(fact[1], int) or isinstance(fact[1], bool):
            raise rec.error(f"has supporting fact {j} = {str(fact)[:80]}", "[title, sentence_index], index an integer")
        out.append((fact[0], fact[1]))
    return out


def _resolve(
    rec: Record,
    context: dict[str, tuple[str, int]],
    facts: list[tuple[str, int]] | None,
    titles: dict[str, str],
    report: IngestReport,
) -> list[str] | None:
    """Gold passage ids for one question, or ``None`` when it is dropped.

    Each ``supporting_facts`` title resolves against the question's own context, else against the whole
    corpus (counted as ``supporting_title_outside_own_context``); a title found nowhere is an error when
    the question has a context. A question with *no* context (36 of the 200 of
    ``2wiki_dev200.original.jsonl``) is kept if all its titles resolve (``question_without_context_resolved``)
    and otherwise dropped (``question_without_context_dropped``): without gold passages it would score zero
    recall for any retriever. A sentence index past its paragraph is counted
    (``supporting_sentence_out_of_range``). A record without ``supporting_facts``, as in the official
    unlabelled test files, keeps no gold (``question_without_gold``): it is ranked, and the evaluator
    leaves it out of the retrieval metrics.
    """
    if facts is None:
        report.add("question_without_gold", rec.label)
        return []
    gold: list[str] = []
    for title, sent in facts:
        if title in context:
            pid, n_sentences = context[title]
            if sent >= n_sentences:
                report.add("supporting_sentence_out_of_range", f"{title!r} sentence {sent} ({rec.label})")
        elif title in titles:
            pid = titles[title]
            if context:
                report.add("supporting_title_outside_own_context", f"{title!r} ({rec.label})")
        elif context:
            raise rec.error(
                f"has supporting title {title!r} that is in neither its context nor any other",
                "supporting_facts titles that name a context paragraph",
            )
        else:
            report.add("question_without_context_dropped", f"{rec.label}: {title!r} not in the corpus")
            return None
        if pid not in gold:
            gold.append(pid)
    if not context:
        report.add("question_without_context_resolved", rec.label)
    return gold
