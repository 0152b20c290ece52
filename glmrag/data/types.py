"""The canonical in-memory form of a multi-hop QA benchmark.

Every importer in :mod:`glmrag.data.importers` produces a :class:`Dataset`:
a :class:`Corpus` of passages and a :class:`QASet` of questions whose gold
evidence is a tuple of passage ids of that corpus. Nothing downstream ever
sees a raw benchmark schema.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field


def passage_id(title: str, text: str) -> str:
    """A stable id for a passage: a hash of its title and text.

    Stable across re-orderings of the corpus and across importers, so an index
    built from one file matches the gold ids of questions read from another.
    """
    # "title\ntext" is ambiguous only when the title holds a newline ("A\nB", "C" against "A", "B\nC"):
    # such a pair is hashed as a JSON list, which never equals a key with a raw newline; every other id is kept
    key = f"{title}\n{text}" if "\n" not in title else json.dumps([title, text])
    digest = hashlib.sha1(key.encode()).hexdigest()
    return f"p{digest[:15]}"


FINGERPRINT_VERSION = 2
"""The rule of :func:`question_fingerprint`, which a checkpoint records beside its fingerprints."""


def canonical_question(text: str) -> str:
    """The spelling-free form of a question: Unicode NFKC (full-width letters, ligatures, NBSP), case folded,
    format characters (zero-width spaces and joiners, soft hyphens: category Cf) and punctuation (category P*:
    ``?``, ``'`` and ``’`` alike) removed, whitespace collapsed to single spaces."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    kept = "".join(c for c in folded if not unicodedata.category(c).startswith(("P", "Cf")))
    return " ".join(kept.split())


def question_fingerprint(text: str) -> str:
    """A hash of a question's :func:`canonical_question`: the same question under any dataset name, id, file or
    spelling variant (a checkpoint records those it trained and validated on; the evaluator refuses to score
    them)."""
    return hashlib.sha256(canonical_question(text).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Passage:
    id: str
    """Stable id (see :func:`passage_id`)."""
    title: str
    text: str

    @classmethod
    def make(cls, title: str, text: str) -> Passage:
        return cls(passage_id(title, text), title, text)


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answers: tuple[str, ...]
    """The gold answer first, then its aliases."""
    supporting: tuple[str, ...]
    """Passage ids of the gold supporting passages (may be empty: no gold)."""
    hops: int | None = None
    type: str | None = None
    decomposition: tuple[str, ...] | None = None
    """Sub-questions, when the benchmark gives them (MuSiQue)."""


@dataclass
class Corpus:
    """An ordered collection of passages with unique ids."""

    passages: list[Passage]
    _by_id: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_id = {p.id: i for i, p in enumerate(self.passages)}
        if len(self._by_id) != len(self.passages):
            raise ValueError("Corpus has duplicate passage ids; deduplicate before building it")

    def __len__(self) -> int:
        return len(self.passages)

    def __iter__(self) -> Iterator[Passage]:
        return iter(self.passages)

    def __getitem__(self, i: int) -> Passage:
        return self.passages[i]

    def __contains__(self, pid: str) -> bool:
        return pid in self._by_id

    def position(self, pid: str) -> int:
        """Row of passage ``pid`` in this corpus (raises ``KeyError``)."""
        return self._by_id[pid]

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.passages]

    def content_hash(self) -> str:
        """Hash of the ordered passage ids: identifies the corpus an index was built from."""
        h = hashlib.sha256()
        for p in self.passages:
            h.update(p.id.encode())
        return h.hexdigest()[:16]


@dataclass
class QASet:
    questions: list[Question]

    def __len__(self) -> int:
        return len(self.questions)

    def __iter__(self) -> Iterator[Question]:
        return iter(self.questions)

    def __getitem__(self, i: int) -> Question:
        return self.questions[i]

    def subset(self, indices: Sequence[int]) -> QASet:
        return QASet([self.questions[i] for i in indices])

    def content_hash(self) -> str:
        h = hashlib.sha256()
        for q in self.questions:
            h.update(json.dumps(asdict(q), sort_keys=True).encode())
        return h.hexdigest()[:16]


@dataclass
class IngestReport:
    """Recoverable problems met while importing, counted and never silently dropped."""

    source: str
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    """Measurements of the import that are not problems (e.g. gold resolution counts)."""

    def add(self, kind: str, example: str, max_examples: int = 5) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < max_examples:
            shown.append(example)

    def summary(self) -> str:
        if not self.counts:
            return f"{self.source}: no problems"
        parts = [f"{kind}={n} (e.g. {self.examples[kind][0]})" for kind, n in sorted(self.counts.items())]
        return f"{self.source}: " + "; ".join(parts)


DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]*")
"""A dataset name: it names cache folders (``<cache>/indexes/<name>-...``), so no path separator, no leading dot."""


def check_dataset_name(name: object, key: str = "data.name") -> str:
    """``name`` when it is a plain dataset name (:data:`DATASET_NAME`); else ``ValueError`` naming ``key``: a name
    such as ``../../tmp/x`` would build its index outside the cache."""
    if not isinstance(name, str) or not DATASET_NAME.fullmatch(name):
        raise ValueError(
            f"{key}={name!r}: a dataset name names cache folders, so it must be letters, digits and . _ + = @ - "
            "(not starting with a dot or a dash; no / or spaces), e.g. my_corpus"
        )
    return name


@dataclass
class Dataset:
    """A named corpus and its questions, plus what the import had to repair."""

    name: str
    corpus: Corpus
    qa: QASet
    report: IngestReport
    openie_path: str | None = None
    """HippoRAG-format OpenIE file for this corpus, when the dataset ships one."""
    splits: dict[str, str] | None = None
    """Question id -> ``train`` / ``validation`` / ``test`` when the files carry their own split
    (a GFM-RAG folder's ``train.json`` / ``test.json``, a ``split`` field); ``None``: the registry's fixed split."""

    def content_hash(self) -> str:
        return hashlib.sha256(f"{self.corpus.content_hash()}:{self.qa.content_hash()}".encode()).hexdigest()[:16]


class DataFormatError(ValueError):
    """A malformed input file: names the file, the record and what was expected. Records are counted from 1
    (``question 4`` is the fourth question object: line 4 of a JSON Lines file without blank lines)."""

    def __init__(self, path: str, record: str, problem: str, expected: str) -> None:
        self.path, self.record, self.problem, self.expected = path, record, problem, expected
        super().__init__(f"{path}: {record}: {problem}; expected {expected}")
