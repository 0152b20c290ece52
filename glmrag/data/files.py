"""A researcher's own files as a dataset: ``python eval.py data=files data.format=hotpotqa data.questions=dev.json``.

:func:`load_files` reads files of one of :data:`FORMATS`; :func:`register_files`
makes them a named dataset of the registry (:mod:`glmrag.data.registry`), so every
part of the project that loads datasets by name (the evaluation job, the training
DataModules) reads them like a built-in one. Which paths each format takes:

==========  ==========================================  ===============================
format      ``questions``                                ``corpus``
==========  ==========================================  ===============================
hipporag    HippoRAG questions ``<name>.json``           ``<name>_corpus.json``
musique     official MuSiQue file (JSON or JSON Lines)   (none: union of paragraphs)
hotpotqa    official HotpotQA file                       (none: union of contexts)
2wiki       official 2WikiMultihopQA file                (none: union of contexts)
linearrag   LinearRAG/SeRAG ``questions.json``           ``[{title, text}]`` corpus
gfmrag      a GFM-RAG folder (holding ``raw/``)          (none: ``raw/dataset_corpus.json``)
plain       JSONL ``{id, question, answers?,             JSONL ``{title, text}``, or a folder
            supporting_titles?}`` (optional)             of text files, one per passage
==========  ==========================================  ===============================

``openie``: an optional HippoRAG OpenIE file of the corpus (use it with
``data.extractor=openie``). Splits: a format that carries its own split (a GFM-RAG
folder, a ``split`` field in plain questions) keeps it; otherwise ``split`` uses the
registry's fixed hash split, and ``split: null`` (the default) takes every question.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from glmrag.data.formats.common import PathLike
from glmrag.data.formats.plain import load_plain
from glmrag.data.importers import load_2wiki, load_gfmrag, load_hipporag, load_hotpotqa, load_linearrag, load_musique
from glmrag.data.types import Dataset

_Loader = Callable[[Path | None, Path | None, str], Dataset]

FORMATS: dict[str, tuple[bool, bool, _Loader]] = {
    # format: (needs questions, needs corpus, loader(questions, corpus, name))
    "hipporag": (True, True, lambda q, c, n: load_hipporag(q, c, n)),
    "musique": (True, False, lambda q, c, n: load_musique(q, n)),
    "hotpotqa": (True, False, lambda q, c, n: load_hotpotqa(q, n)),
    "2wiki": (True, False, lambda q, c, n: load_2wiki(q, n)),
    "linearrag": (True, True, lambda q, c, n: load_linearrag(q, c, n)),
    "gfmrag": (True, False, lambda q, c, n: load_gfmrag(q, None, n)),
    "plain": (False, True, lambda q, c, n: load_plain(c, q, n)),
}
"""Format -> (questions path required, corpus path required, loader)."""


def load_files(
    format: str,
    questions: PathLike | None = None,
    corpus: PathLike | None = None,
    openie: PathLike | None = None,
    name: str = "files",
) -> Dataset:
    """The dataset in ``questions`` / ``corpus`` read as ``format`` (see the module table).

    Raises ``ValueError`` naming the missing path or the unknown format, and the
    importers' :class:`~glmrag.data.types.DataFormatError` for a malformed file.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown data format {format!r}; expected one of {', '.join(FORMATS)}")
    needs_questions, needs_corpus, loader = FORMATS[format]
    if needs_questions and not questions:
        what = "a GFM-RAG folder (holding raw/)" if format == "gfmrag" else "the questions file"
        raise ValueError(f"format {format} needs data.questions: {what}")
    if needs_corpus and not corpus:
        raise ValueError(f"format {format} needs data.corpus: the passages file{' or folder' * (format == 'plain')}")
    if not needs_corpus and corpus:
        raise ValueError(f"format {format} reads its corpus from data.questions; leave data.corpus empty")
    ds = loader(Path(questions) if questions else None, Path(corpus) if corpus else None, name)
    if openie:
        if not Path(openie).is_file():
            raise FileNotFoundError(f"data.openie={openie} does not exist; give a HippoRAG openie_*.json or null")
        ds.openie_path = str(openie)
    return ds


def register_files(
    name: str,
    format: str,
    questions: PathLike | None = None,
    corpus: PathLike | None = None,
    openie: PathLike | None = None,
) -> str:
    """Register these files as dataset ``name`` (replacing an earlier registration of files); returns ``name``.

    A built-in dataset's name cannot be taken: the index cache is keyed by name.
    """
    from glmrag.data.registry import DATASETS, DatasetSpec

    if name in DATASETS and DATASETS[name].build.__name__ != "_build_files":
        raise ValueError(f"data.name={name!r} is a built-in dataset; give your files another name")
    paths = {"questions": questions, "corpus": corpus, "openie": openie}
    loaded = {_stamp(paths): load_files(format, **paths, name=name)}  # fails now, naming the file

    def _build_files(_: Path) -> Dataset:
        stamp = _stamp(paths)
        if stamp not in loaded:  # a file changed since: read it again
            loaded.clear()
            loaded[stamp] = load_files(format, **paths, name=name)
        return replace(loaded[stamp])  # load_dataset replaces .qa of its copy, never the cached one

    files = tuple(str(p) for p in paths.values() if p)
    DATASETS[name] = DatasetSpec(name, f"{format} files: {', '.join(files)}", files, _build_files, embedded=True)
    return name


def _stamp(paths: Mapping[str, PathLike | None]) -> tuple:
    """Modification times of the given paths (a folder: of its files), to notice an edited file."""
    out = []
    for p in paths.values():
        if p:
            p = Path(p)
            files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
            out.extend((str(f), f.stat().st_mtime_ns) for f in files if f.exists())
    return tuple(out)


def register_data(data: Mapping[str, Any]) -> None:
    """Register a ``data`` config node's files when it names a ``format`` (``configs/data/files.yaml``)."""
    if data.get("format"):
        register_files(data["name"], data["format"], data.get("questions"), data.get("corpus"), data.get("openie"))
