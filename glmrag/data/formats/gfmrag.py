"""GFM-RAG's raw dataset layout (``<folder>/raw/``, RManLuo/gfm-rag "Build Your Own Dataset")::

    raw/dataset_corpus.json   {title: text}   (a [{title, text}] list is accepted too)
    raw/train.json            [{id, question, answer?, supporting_facts}]   (optional)
    raw/test.json             same shape                                    (optional)

``supporting_facts`` name corpus titles, as strings or HotpotQA ``[title, sentence_index]`` pairs. Titles
are identifiers: a title given two texts is an error, and every supporting title must be in the corpus.
``hops`` = number of distinct supporting titles.
"""

from __future__ import annotations

from pathlib import Path

from glmrag.data.formats.common import (
    CorpusBuilder,
    DataFileNotFoundError,
    PathLike,
    QuestionIds,
    Record,
    answers_of,
    question_records,
    read_title_text_corpus,
)
from glmrag.data.types import Dataset, IngestReport, QASet, Question

GFMRAG_SPLITS = ("train", "test")
_RECORD = "{id, question, answer, supporting_facts}"
_FACTS = "a non-empty list of corpus titles (strings or [title, sentence_index] pairs)"


def load_gfmrag(folder: PathLike, split: str | None = None, name: str | None = None) -> Dataset:
    """A dataset from a GFM-RAG folder; ``split`` picks ``train.json`` or ``test.json`` (None: both present).

    Promises: the corpus is ``dataset_corpus.json`` in file order; question ids are
    unique across the files read; ``dataset.splits`` names the file each question came from
    (``train`` / ``test``); every question has at least one supporting
    title, each resolved to its corpus passage (else :class:`DataFormatError`).
    """
    raw = Path(folder) / "raw"
    if split is not None and split not in GFMRAG_SPLITS:
        raise ValueError(f"split {split!r} is not a GFM-RAG split; use one of {GFMRAG_SPLITS} or None")
    files = [raw / f"{s}.json" for s in ((split,) if split else GFMRAG_SPLITS)]
    present = [f for f in files if f.is_file()]
    if not present:
        raise DataFileNotFoundError(str(files[0]), "file", "does not exist", f"{' or '.join(map(str, files))}")

    corpus_path = raw / "dataset_corpus.json"
    report = IngestReport(str(raw))
    builder = CorpusBuilder(report, titles_are_ids=True)
    read_title_text_corpus(corpus_path, builder)
    titles = builder.titles
    ids = QuestionIds()
    questions = []
    splits: dict[str, str] = {}
    for path in present:
        for rec, qid, question in question_records(path, _RECORD):
            ids.check(qid, rec)  # unique across the files too
            answers = answers_of(rec, required=False)
            gold = [_resolve(rec, title, titles, corpus_path) for title in _fact_titles(rec)]
            gold = list(dict.fromkeys(gold))
            qtype = rec.get("type", str, "type as a string", required=False)
            questions.append(Question(qid, question, answers, tuple(gold), hops=len(gold), type=qtype))
            splits[qid] = path.stem
    ds = Dataset(name or Path(folder).name, builder.build(corpus_path), QASet(questions), report)
    ds.splits = splits
    return ds


def _fact_titles(rec: Record) -> list[str]:
    facts = rec.get("supporting_facts", list, _FACTS)
    if not facts:
        raise rec.error("has an empty 'supporting_facts' list", _FACTS)
    titles = []
    for j, fact in enumerate(facts, start=1):
        if isinstance(fact, list) and fact and isinstance(fact[0], str):
            fact = fact[0]
        if not isinstance(fact, str):
            raise rec.error(f"has supporting fact {j} = {str(fact)[:80]}", _FACTS)
        titles.append(fact)
    return titles


def _resolve(rec: Record, title: str, titles: dict[str, str], corpus_path: Path) -> str:
    if title not in titles:
        raise rec.error(
            f"has supporting title {title!r} that is not in {corpus_path.name}",
            "supporting_facts titles that are keys of the corpus",
        )
    return titles[title]
