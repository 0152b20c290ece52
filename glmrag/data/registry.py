"""Named datasets: ``load_dataset("musique100", split="test", limit=20)``.

Three datasets are embedded in the package (``glmrag/data/embedded/NOTICE.md``); the others are read from
the data folder (:func:`data_dir`). No registered dataset has an official train/validation/test
partition of its questions, so each is split one fixed way by :func:`split_assignment` (a dataset whose
files carry their own split keeps it). The corpus is always the full corpus; ``limit`` keeps the first N
questions (file order) of the split. ``musique100`` ships HippoRAG's OpenIE extraction of its corpus,
decompressed into the cache (``dataset.openie_path``, read by
:class:`~glmrag.index.extractors.openie_import.OpenIEImportExtractor`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from glmrag.data.embedded_files import embedded_path, materialize
from glmrag.data.importers import load_2wiki, load_hipporag, load_linearrag
from glmrag.data.types import Dataset

SPLITS = ("train", "validation", "test")
SPLIT_SEED = "glmrag-split-v1"
SPLIT_FRACTIONS = (0.6, 0.2)
"""Shares of train and validation; test takes the rest."""
DEFAULT_DATASET = "musique100"
DATA_DIR_ENV = "GLMRAG_DATA_DIR"
OPENIE_MUSIQUE = "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"
TWIKI_TRAIN = "2wiki_train500_preprocess.original.json"


@dataclass(frozen=True)
class DatasetSpec:
    """How to build one named dataset."""

    name: str
    description: str
    files: tuple[str, ...]
    """Input files: embedded file names, or paths relative to the data folder."""
    build: Callable[[Path], Dataset]
    """Builds the full dataset; given the data folder (ignored when embedded)."""
    embedded: bool = False


def _musique100(_: Path) -> Dataset:
    ds = load_hipporag(embedded_path("musique_train.json"), embedded_path("musique_train_corpus.json"), "musique100")
    ds.openie_path = str(materialize(OPENIE_MUSIQUE))
    return ds


def _toy(_: Path) -> Dataset:
    return load_hipporag(embedded_path("sample.json"), embedded_path("sample_corpus.json"), "toy")


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "musique100",
            "100 MuSiQue questions (68 2-hop, 27 3-hop, 5 4-hop), 1,890 passages, exact gold, HippoRAG OpenIE "
            "triples; embedded (the default)",
            ("musique_train.json", "musique_train_corpus.json", OPENIE_MUSIQUE),
            _musique100,
            embedded=True,
        ),
        DatasetSpec(
            "toy",
            "HippoRAG's sample: 1 question, 3 passages; embedded",
            ("sample.json", "sample_corpus.json"),
            _toy,
            embedded=True,
        ),
        DatasetSpec(
            "2wiki_dev",
            "200 2WikiMultihopQA dev questions (36 without context: dropped, see the report); corpus = union of "
            "contexts; exact gold",
            ("2wiki-dev-200/2wiki_dev200.original.jsonl",),
            lambda root: load_2wiki(root / "2wiki-dev-200/2wiki_dev200.original.jsonl", "2wiki_dev"),
        ),
        DatasetSpec(
            "2wiki_train",
            "500 2WikiMultihopQA train questions, 3,112 passages (the union of their contexts), exact gold; "
            "embedded (the README's main job)",
            (TWIKI_TRAIN,),
            lambda _: load_2wiki(embedded_path(TWIKI_TRAIN), "2wiki_train"),
            embedded=True,
        ),
        DatasetSpec(
            "2wiki_test",
            "the 1,000 2WikiMultihopQA test questions of HippoRAG/GFM-RAG with their 6,119-passage corpus; "
            "approximate gold from evidence heads (resolution in report.stats)",
            ("2wiki-test-1000/questions_linearrag_format.json", "2wiki-test-1000/2wikimultihopqa_corpus.json"),
            lambda root: load_linearrag(
                root / "2wiki-test-1000/questions_linearrag_format.json",
                root / "2wiki-test-1000/2wikimultihopqa_corpus.json",
                "2wiki_test",
            ),
        ),
    )
}


def load_dataset(name: str, split: str | None = None, limit: int | None = None, root: str | None = None) -> Dataset:
    """The named dataset: full corpus, questions of ``split`` (None: all), at most ``limit`` of them.

    Raises ``KeyError`` for an unknown name, ``ValueError`` for a bad split or
    limit, ``FileNotFoundError`` (saying where it looked) when external data is
    missing, and :class:`DataFormatError` for a malformed file.
    """
    if name not in DATASETS:
        raise KeyError(
            f"unknown dataset {name!r}; registered: {', '.join(DATASETS)} "
            "(your own files: data=files data.format=... data.questions=..., see glmrag/data/files.py)"
        )
    if split is not None and split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {SPLITS} (or None for all questions)")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, got {limit}")
    spec = DATASETS[name]
    folder = Path() if spec.embedded else data_dir(root, spec)
    ds = spec.build(folder)
    assignment = ds.splits if ds.splits is not None else split_assignment([q.id for q in ds.qa])
    keep = [i for i, q in enumerate(ds.qa) if split is None or assignment[q.id] == split]
    ds.qa = ds.qa.subset(keep[:limit] if limit is not None else keep)
    return ds


def split_assignment(question_ids: list[str]) -> dict[str, str]:
    """Question id -> ``train`` / ``validation`` / ``test``.

    Questions are ranked by ``sha256("glmrag-split-v1:" + id)``; the first ``round(0.6 n)`` are ``train``,
    the next ``round(0.2 n)`` ``validation``, the rest ``test`` (musique100: exactly 60/20/20). The split
    depends only on the ids, never on file order or ``limit``.
    """
    ranked = sorted(question_ids, key=lambda qid: hashlib.sha256(f"{SPLIT_SEED}:{qid}".encode()).digest())
    n_train = round(SPLIT_FRACTIONS[0] * len(ranked))
    n_val = round(SPLIT_FRACTIONS[1] * len(ranked))
    return {
        qid: "train" if rank < n_train else "validation" if rank < n_train + n_val else "test"
        for rank, qid in enumerate(ranked)
    }


def default_data_dir() -> Path:
    """``<repo root>/../shared/data``, the repo root being two levels above this package folder."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def data_dir(root: str | os.PathLike[str] | None = None, spec: DatasetSpec | None = None) -> Path:
    """The data folder: ``root``, else ``$GLMRAG_DATA_DIR``, else :func:`default_data_dir`.

    With a ``spec``, also checks that its files are there, else raises
    ``FileNotFoundError`` naming where it looked and how to point at the data.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if root:
        folder, how = Path(root), "the root argument"
    elif env:
        folder, how = Path(env), f"${DATA_DIR_ENV}"
    else:
        folder, how = default_data_dir(), "the default <repo root>/../shared/data"
    missing = [f for f in (spec.files if spec else ()) if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"dataset {spec.name!r} needs {', '.join(missing)} under {folder} ({how}), which is not there; "
            f"pass root='/path/to/data' to load_dataset or set {DATA_DIR_ENV} to the folder that holds "
            f"{spec.files[0].split('/')[0]}/"
        )
    return folder
