"""LinearRAG / SeRAG question files with a separate ``[{title, text}]`` corpus.

Question shape (SeRAG ``dataset/2wikimultihop/questions.json``)::

    {"id": str, "question": str, "answer": str | [str], "question_type": str?,
     "evidence": [[head, relation, tail], ...], ...}

There are no supporting facts, so gold is approximate: the distinct **head entities** of the
``evidence`` triples, matched to corpus titles (:func:`load_linearrag` says how and what is counted).
``hops`` = number of distinct evidence heads; ``type`` = ``question_type``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from pathlib import Path

from glmrag.data.formats.common import (
    CorpusBuilder,
    PathLike,
    Record,
    answers_of,
    question_records,
    read_title_text_corpus,
)
from glmrag.data.types import Dataset, IngestReport, QASet, Question

_RECORD = "{id, question, answer, evidence}"
_EVIDENCE = "a list of [head, relation, tail] string triples"
_NON_ALNUM = re.compile(r"[\W_]+")


def normalise_title(title: str) -> str:
    """``title`` in NFKC, case-folded, with every non-alphanumeric character removed."""
    return _NON_ALNUM.sub("", unicodedata.normalize("NFKC", title).casefold())


def load_linearrag(questions_path: PathLike, corpus_path: PathLike, name: str | None = None) -> Dataset:
    """A dataset from LinearRAG-format questions and a ``[{title, text}]`` corpus.

    Promises: the corpus is the corpus file in order (titles unique: one title with
    two texts is a :class:`DataFormatError`); ``supporting`` holds the resolved
    evidence heads' passage ids. A head matches a title exactly first, then by
    :func:`normalise_title` (case, punctuation and whitespace ignored); a head whose
    normalised form names several titles gives all of them (``evidence_head_ambiguous``).
    Questions are kept however much of their gold resolves; ``report.stats`` has
    ``gold_full``, ``gold_partial``, ``gold_none`` (questions) and ``heads``, ``heads_exact``,
    ``heads_normalised``, ``heads_unresolved``; ``report.counts`` has ``gold_partial``,
    ``gold_none`` and ``evidence_head_not_in_corpus``, with examples.
    """
    report = IngestReport(str(questions_path))
    builder = CorpusBuilder(report, titles_are_ids=True)
    read_title_text_corpus(corpus_path, builder)
    exact = builder.titles
    normalised: dict[str, list[str]] = defaultdict(list)
    for title, pid in exact.items():
        normalised[normalise_title(title)].append(pid)

    stats = dict.fromkeys(
        ("gold_full", "gold_partial", "gold_none", "heads", "heads_exact", "heads_normalised", "heads_unresolved"), 0
    )
    questions = []
    for rec, qid, question in question_records(questions_path, _RECORD):
        answers = answers_of(rec)
        heads = _evidence_heads(rec)
        gold: list[str] = []
        resolved = 0
        for head in heads:
            if head in exact:
                pids, kind = [exact[head]], "heads_exact"
            elif normalised.get(normalise_title(head)):
                pids, kind = normalised[normalise_title(head)], "heads_normalised"
                if len(pids) > 1:
                    report.add("evidence_head_ambiguous", f"{head!r} ({rec.label})")
            else:
                pids, kind = [], "heads_unresolved"
                report.add("evidence_head_not_in_corpus", f"{head!r} ({rec.label})")
            stats["heads"] += 1
            stats[kind] += 1
            resolved += bool(pids)
            gold.extend(p for p in pids if p not in gold)
        outcome = "gold_full" if heads and resolved == len(heads) else "gold_partial" if resolved else "gold_none"
        stats[outcome] += 1
        if outcome != "gold_full":
            report.add(outcome, f"{rec.label}: {resolved}/{len(heads)} evidence heads found")
        qtype = rec.get("question_type", str, "question_type as a string", required=False)
        questions.append(Question(qid, question, answers, tuple(gold), hops=len(heads), type=qtype))
    report.stats.update(stats)
    name = name or Path(questions_path).name.split(".", 1)[0]
    return Dataset(name, builder.build(corpus_path), QASet(questions), report)


def _evidence_heads(rec: Record) -> list[str]:
    """Distinct head entities of the record's evidence triples, in order."""
    evidence = rec.get("evidence", list, _EVIDENCE, required=False) or []
    heads: dict[str, None] = {}
    for j, triple in enumerate(evidence, start=1):
        if not (isinstance(triple, list) and len(triple) == 3 and all(isinstance(x, str) for x in triple)):
            raise rec.error(f"has evidence {j} = {str(triple)[:80]}", _EVIDENCE)
        heads[triple[0]] = None
    return list(heads)
