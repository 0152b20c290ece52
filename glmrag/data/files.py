"""A researcher's own files as a dataset: ``python eval.py data=files data.format=hotpotqa data.questions=dev.json``.

:func:`load_files` reads files of one of :data:`FORMATS` (the table of which paths each takes);
:func:`register_files` makes them a named dataset of the registry, so the evaluation job and the training
DataModules read them like a built-in one. A format error that another format would not raise names
that format (:func:`suggest_format`). ``openie`` is an optional HippoRAG OpenIE file of the corpus (use
it with ``data.extractor=openie``). A format that carries its own split (a GFM-RAG folder, a ``split``
field in plain questions) keeps it; otherwise ``split`` uses the registry's fixed hash split, and
``split: null`` (the default) takes every question.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from glmrag.data.formats.common import PathLike, read_records
from glmrag.data.formats.plain import load_plain
from glmrag.data.importers import load_2wiki, load_gfmrag, load_hipporag, load_hotpotqa, load_linearrag, load_musique
from glmrag.data.types import DataFormatError, Dataset, check_dataset_name

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
"""Format -> (questions path required, corpus path required, loader). The paths each format takes:

==========  ==========================================  ===============================
format      ``questions``                                ``corpus``
==========  ==========================================  ===============================
hipporag    HippoRAG ``<name>.json`` (MuSiQue- or        ``<name>_corpus.json``
            HotpotQA-shaped records)
musique     official MuSiQue file (JSON or JSON Lines)   (none: union of paragraphs)
hotpotqa    official HotpotQA file                       (none: union of contexts)
2wiki       official 2WikiMultihopQA file                (none: union of contexts)
linearrag   LinearRAG/SeRAG ``questions.json``           ``[{title, text}]`` corpus
gfmrag      a GFM-RAG folder (holding ``raw/``)          (none: ``raw/dataset_corpus.json``)
plain       JSONL ``{id, question, answers?,             JSONL ``{title, text}``, or a folder
            supporting_titles?}`` (optional)             of text files, one per passage
==========  ==========================================  ===============================
"""


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
    q_path, c_path = Path(questions) if questions else None, Path(corpus) if corpus else None
    try:
        ds = loader(q_path, c_path, name)
    except DataFormatError as e:
        hint = suggest_format(format, q_path, c_path)
        if hint is None:
            raise
        raise DataFormatError(e.path, e.record, e.problem, f"{e.expected}. {hint}") from e
    if openie:
        if not Path(openie).is_file():
            raise FileNotFoundError(f"data.openie={openie} does not exist; give a HippoRAG openie_*.json or null")
        ds.openie_path = str(openie)
    return ds


def suggest_format(failed: str, questions: Path | None, corpus: Path | None) -> str | None:
    """Which other format reads these files, said with the record that shows it; None when none does.

    The shape of the first question record proposes candidates, and a candidate is named only if it
    reads the files without error.
    """
    for format, why in _candidates(questions):
        takes_corpus = FORMATS[format][1]
        if format == failed or (takes_corpus and corpus is None):
            continue
        try:
            FORMATS[format][2](questions, corpus if takes_corpus else None, "suggestion")
        except (DataFormatError, ValueError):
            continue
        unset = " with data.corpus=null" if corpus is not None and not takes_corpus else ""
        return f"{questions}: {why}: data.format={format}{unset} reads it"
    return None


def _candidates(questions: Path | None) -> list[tuple[str, str]]:
    """``(format, why)`` of the formats the first question record of ``questions`` looks like, best first."""
    if questions is None:
        return []
    if questions.is_dir():
        return [("gfmrag", "a folder holding raw/")] if (questions / "raw").is_dir() else []
    try:
        records = read_records(questions, "question objects")
    except DataFormatError:
        return []
    first = records[0] if isinstance(records[0], dict) else {}
    has = [key for key in first if first.get(key) is not None]
    label = f"question 1 has {', '.join(map(repr, has[:8]))}"
    if "paragraphs" in first or "contexts" in first:
        return [("hipporag", f"{label} (MuSiQue shape)"), ("musique", f"{label} (MuSiQue shape)")]
    if "supporting_facts" in first and "context" in first:
        source = "2wiki" if "evidences" in first else "hotpotqa"
        other = "hotpotqa" if source == "2wiki" else "2wiki"
        why = f"{label} (HotpotQA shape)"
        return [("hipporag", why), (source, why), (other, why)]
    if "evidence" in first:
        return [("linearrag", f"{label} (LinearRAG shape)")]
    if "supporting_facts" in first:
        return [("hipporag", f"{label} (HotpotQA shape without context)")]
    return [("plain", label)] if "supporting_titles" in first or "answers" in first else []


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

    check_dataset_name(name)
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
