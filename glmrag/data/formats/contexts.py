"""Question files with sentence-split contexts: official HotpotQA and 2WikiMultihopQA.

Record shape (2WikiMultihopQA adds ``evidences`` and more; ignored here)::

    {"_id" | "id": str, "question": str, "answer": str, "type": str?,
     "context": [[title, [sentence, ...]], ...],
     "supporting_facts": [[title, sentence_index], ...]}

Conventions, each chosen to reproduce a published corpus:

* Passage text = the sentences concatenated, with one space between two sentences
  unless the next already begins with whitespace. HotpotQA keeps each sentence's
  leading space, so this restores its paragraph; 2WikiMultihopQA's sentences have
  none, and the result equals the text of HippoRAG's ``2wikimultihopqa_corpus.json``
  (all 3,029 paragraphs shared with ``2wiki-dev-200`` match byte for byte).
* The corpus is the union of all contexts in first-seen order; exact duplicates are
  merged and counted (``duplicate_passage``). Titles are identifiers (gold is given
  by title), so one title with two different texts is a :class:`DataFormatError`.
* Gold = the distinct ``supporting_facts`` titles, resolved against the question's
  own context, else against the whole corpus (counted as
  ``supporting_title_outside_own_context``). A title found nowhere is an error when
  the question has a context. A question with *no* context (36 of the 200 questions
  of ``2wiki_dev200.original.jsonl``) is kept if all its titles resolve in the
  corpus (``question_without_context_resolved``) and otherwise **dropped**, counted
  as ``question_without_context_dropped``: a question without gold passages would
  score zero recall for any retriever.
* A sentence index past the end of its paragraph is counted
  (``supporting_sentence_out_of_range``); only titles matter for passage gold.
* A record without ``supporting_facts`` (and ``answer``), as in the official unlabelled
  test files, is kept with no gold (counted as ``question_without_gold``): it is ranked,
  and the evaluator leaves it out of the retrieval metrics.
* ``hops`` = number of distinct supporting titles; ``type`` = the record's ``type``.
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
    """A dataset from an official 2WikiMultihopQA file (JSON list, or ``.jsonl``)."""
    return _load_contexts(path, name)


def _load_contexts(path: PathLike, name: str | None) -> Dataset:
    """Two passes: the corpus from every context first, so that gold can resolve across questions."""
    report = IngestReport(str(path))
    builder = CorpusBuilder(report, titles_are_ids=True)
    ids = QuestionIds()
    parsed = []
    for i, raw in enumerate(read_records(path, "question objects {_id, question, answer, context, ...}")):
        rec = Record(raw, path, f"question {i}", _RECORD)
        qid = rec.with_id(("_id", "id"))
        ids.check(qid, rec)
        question = rec.text("question", "a non-empty question string")
        answers = answers_of(rec, required=False)  # official test files carry no answer
        context = _read_context(rec, builder)
        facts = _read_facts(rec)
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
    for j, pair in enumerate(context):
        where = f"{rec.label} context {j}"
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], list)):
            raise rec.error(f"has context {j} = {str(pair)[:80]}", _CONTEXT)
        title, sentences = pair
        if not all(isinstance(s, str) for s in sentences):
            raise rec.error(f"has a non-string sentence in context {j} ({title!r})", "sentences as strings")
        out[title] = (builder.add(title, join_sentences(sentences), rec.path, where), len(sentences))
    return out


def _read_facts(rec: Record) -> list[tuple[str, int]] | None:
    """The record's ``[title, sentence_index]`` pairs; ``None`` when it has none (an unlabelled test file)."""
    facts = rec.get("supporting_facts", list, _FACTS, required=False)
    if facts is None:
        return None
    if not facts:
        raise rec.error("has an empty 'supporting_facts' list", _FACTS)
    out = []
    for j, fact in enumerate(facts):
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
    """Gold passage ids for one question, or ``None`` when it is dropped (see module docs)."""
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
