"""A sharded index build: the per-passage work split over machines (a SLURM array), one merge for the rest.

Shard ``i/n`` (0-based ``i``) takes the ``i``-th of ``n`` runs of consecutive passages (:meth:`Shard.bounds`),
extracts, normalises and embeds its entity candidates (:func:`~glmrag.index.build.extract_part`, the expensive
work: LLM OpenIE, spaCy, phrase embeddings) and writes them to ``<root>/shard-<i>-of-<n>/``. The merge reads
the ``n`` shards and runs :func:`~glmrag.index.build.assemble_index`, the same code as the one-machine
:func:`~glmrag.index.build.build_index`: vocabularies (sorted, so independent of the shard count), triples,
synonym search, question links. A 2- or 3-shard build merged equals the one-machine build
(``tests/index/test_sharded_build.py``); ``docs/clusters.md`` has the commands.

A shard folder is written atomically (:func:`glmrag.io.atomic_write_folder`)::

    manifest.json   kind, shard, shards, passages [start, stop), inputs (format version, corpus hash and size,
                    extractor, the settings a shard reads), embedder, counts, report, timings_s, sha256 of each file
    passages.jsonl  {"id", "entities", "triples"} per passage, normalised
    phrases.json    the sorted entity candidates of these passages
    vectors.npy     (len(phrases), d) float32 unit rows, only with an embed_model

A merge refuses a missing shard, a corrupt one, and shards of another corpus, extractor or shard settings,
naming the shard's file and the command that fixes it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glmrag.data.types import Corpus, QASet, Question
from glmrag.index.build import (
    FORMAT_VERSION,
    IndexPart,
    IndexSettings,
    assemble_index,
    extract_part,
    resolve_embedder,
)
from glmrag.index.embed import Embedder
from glmrag.index.extractors.base import Extractor
from glmrag.index.kg import KGIndex
from glmrag.index.store import manifest_differences
from glmrag.io import atomic_write_folder

MANIFEST = "manifest.json"
KIND = "glmrag-index-shard"
SHARD_SETTINGS = ("embed_model", "include_isolated_entities")
"""The :class:`~glmrag.index.build.IndexSettings` fields a shard's work reads; the others (synonyms, question
links) belong to the merge, so one set of shards serves merges that differ only in them."""
RERUN = "python -m glmrag.jobs.index <the same data=... index.* overrides>"
"""How an error names the command that writes shards (with ``shard=i/n`` or ``merge=true`` appended)."""


class ShardError(RuntimeError):
    """Shards that cannot be merged into the index asked for: missing, corrupt or built from other inputs."""


@dataclass(frozen=True)
class Shard:
    """Part ``index`` of ``count`` (0-based) of a corpus."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: expected i/n with n >= 1 and 0 <= i < n (0-based)")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"1/4"`` -> ``Shard(1, 4)``."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if match is None:
            raise ValueError(f"shard={text!r}: expected i/n, e.g. shard=0/4 (0-based i, n shards)")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def from_slurm(cls, environ: Mapping[str, str] = os.environ) -> Shard | None:
        """The shard of this SLURM array task (``$SLURM_ARRAY_TASK_ID - $SLURM_ARRAY_TASK_MIN`` of
        ``$SLURM_ARRAY_TASK_COUNT``); None outside an array job. An array resubmitted for one failed task
        (``--array=5``) reads as 0/1: rerun a shard with ``shard=i/n`` instead."""
        if "SLURM_ARRAY_TASK_ID" not in environ or "SLURM_ARRAY_TASK_COUNT" not in environ:
            return None
        index = int(environ["SLURM_ARRAY_TASK_ID"]) - int(environ.get("SLURM_ARRAY_TASK_MIN", 0))
        count = int(environ["SLURM_ARRAY_TASK_COUNT"])
        if not 0 <= index < count:
            raise ValueError(
                f"SLURM array task {environ['SLURM_ARRAY_TASK_ID']} is not one of {count} consecutive tasks "
                "(an --array with steps or gaps); submit --array=0-<n-1>, or pass shard=i/n yourself"
            )
        return cls(index, count)

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}-of-{self.count:05d}"

    def bounds(self, passages: int) -> tuple[int, int]:
        """``[start, stop)`` of this shard's passages: ``count`` runs whose sizes differ by at most one."""
        return self.index * passages // self.count, (self.index + 1) * passages // self.count

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_inputs(corpus: Corpus, extractor: Extractor, settings: IndexSettings) -> dict:
    """What a shard's content depends on (besides its position): checked by the merge, hashed by :func:`shard_key`."""
    return json.loads(
        json.dumps(
            {
                "format_version": FORMAT_VERSION,
                "corpus_hash": corpus.content_hash(),
                "corpus_passages": len(corpus),
                "extractor": extractor.describe(),
                "settings": {name: getattr(settings, name) for name in SHARD_SETTINGS},
            }
        )
    )


def shard_key(corpus: Corpus, extractor: Extractor, settings: IndexSettings) -> str:
    """A short hash of :func:`shard_inputs`: the default shard folder of these inputs is named by it."""
    inputs = json.dumps(shard_inputs(corpus, extractor, settings), sort_keys=True)
    return hashlib.sha256(inputs.encode()).hexdigest()[:10]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_shard(
    corpus: Corpus,
    extractor: Extractor,
    embedder: Embedder | None,
    settings: IndexSettings,
    shard: Shard,
    root: str | Path,
) -> Path:
    """Extract and embed ``shard``'s passages of ``corpus`` and write them to ``<root>/<shard.name>`` (atomically,
    replacing an older copy); the folder. ``embedder`` must be of ``settings.embed_model`` (None: made from it)."""
    embedder = resolve_embedder(embedder, settings)
    start, stop = shard.bounds(len(corpus))
    part = extract_part(Corpus(corpus.passages[start:stop]), extractor, embedder, settings)
    files = {
        "passages.jsonl": "".join(
            json.dumps({"id": pid, "entities": ents, "triples": triples}, ensure_ascii=False) + "\n"
            for pid, (ents, triples) in zip(part.passage_ids, part.per_passage, strict=True)
        ).encode(),
        "phrases.json": json.dumps(part.phrases, ensure_ascii=False).encode(),
    }
    if part.vectors is not None:
        buf = io.BytesIO()
        np.save(buf, np.asarray(part.vectors, dtype=np.float32), allow_pickle=False)
        files["vectors.npy"] = buf.getvalue()
    manifest = {
        "kind": KIND,
        "shard": shard.index,
        "shards": shard.count,
        "passages": [start, stop],
        "inputs": shard_inputs(corpus, extractor, settings),
        "embedder": embedder.model_name if embedder is not None else None,
        "counts": {"passages": stop - start, "phrases": len(part.phrases)},
        "report": part.report,
        "timings_s": {k: round(v, 3) for k, v in part.timings.items()},
        "files": {name: _sha(data) for name, data in files.items()},
    }
    files[MANIFEST] = json.dumps(manifest, ensure_ascii=False, indent=1).encode()
    return atomic_write_folder(Path(root) / shard.name, files)


def shard_counts(root: str | Path) -> list[int]:
    """The shard counts ``n`` of the ``shard-*-of-<n>`` folders under ``root``, sorted."""
    names = (re.fullmatch(r"shard-\d+-of-(\d+)", p.name) for p in Path(root).glob("shard-*-of-*") if p.is_dir())
    return sorted({int(m[1]) for m in names if m is not None})


def _count(root: Path, count: int | None) -> int:
    if count is not None:
        return count
    counts = shard_counts(root)
    if not counts:
        raise ShardError(f"{root}: no shard folders (shard-<i>-of-<n>); write them first: {RERUN} shard=i/n")
    if len(counts) > 1:
        raise ShardError(
            f"{root}: holds shards of {len(counts)} different counts {counts}; merge one set with merge=<n> "
            "(e.g. merge=" + str(counts[-1]) + "), or delete the folders of the old split"
        )
    return counts[0]


def read_shard(folder: Path, shard: Shard, corpus: Corpus, inputs: dict) -> IndexPart:
    """The :class:`IndexPart` stored in ``folder``, checked against the merge's corpus and ``inputs``."""
    rerun = f"rerun it: {RERUN} shard={shard}"
    path = folder / MANIFEST
    if not path.is_file():
        raise ShardError(f"{path}: shard {shard} is missing (not written, or its job failed); {rerun}, then merge")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ShardError(f"{path}: unreadable shard manifest ({err}); {rerun}") from err
    manifest = manifest if isinstance(manifest, dict) else {}
    have = manifest.get("inputs") if isinstance(manifest.get("inputs"), dict) else {}
    if manifest.get("kind") != KIND or have.get("format_version") != FORMAT_VERSION:
        raise ShardError(f"{path}: not a shard of this index format (format {have.get('format_version')!r}); {rerun}")
    if (have.get("corpus_hash"), have.get("corpus_passages")) != (inputs["corpus_hash"], inputs["corpus_passages"]):
        raise ShardError(
            f"{path}: shard {shard} was built from another corpus (hash {have.get('corpus_hash')}, "
            f"{have.get('corpus_passages')} passages; this merge: {inputs['corpus_hash']}, {inputs['corpus_passages']} "
            f"passages); rebuild the shards of this data.* ({RERUN} shard=i/n) or point shard_dir at this corpus's"
        )
    if diffs := manifest_differences(have, inputs, what="shard"):
        raise ShardError(
            f"{path}: shard {shard} was built with other inputs than this merge:\n  "
            + "\n  ".join(diffs)
            + f"\nrebuild the shards with the merge's index.* settings ({RERUN} shard=i/n), or merge with theirs"
        )
    start, stop = shard.bounds(len(corpus))
    listed = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    required = {"passages.jsonl", "phrases.json"} | ({"vectors.npy"} if inputs["settings"]["embed_model"] else set())
    if set(listed) != required:
        raise ShardError(
            f"{path}: lists files {sorted(listed)}, a shard of these settings has {sorted(required)}; {rerun}"
        )
    blobs = {}
    for name, sha in listed.items():
        blob = (folder / name).read_bytes() if (folder / name).is_file() else None
        if blob is None or _sha(blob) != sha:
            raise ShardError(f"{folder / name}: {'missing' if blob is None else 'checksum mismatch'}; {rerun}")
        blobs[name] = blob
    rows = [json.loads(line) for line in blobs["passages.jsonl"].decode().splitlines()]
    ids = [row["id"] for row in rows]
    if manifest.get("passages") != [start, stop] or ids != corpus.ids[start:stop]:
        raise ShardError(f"{path}: shard {shard} holds other passages than rows {start}-{stop} of the corpus; {rerun}")
    vectors = np.load(io.BytesIO(blobs["vectors.npy"]), allow_pickle=False) if "vectors.npy" in blobs else None
    per_passage = [(row["entities"], [tuple(t) for t in row["triples"]]) for row in rows]
    try:
        timings = {k: float(manifest["timings_s"][k]) for k in ("extract", "embed_entities")}
        report = dict(manifest["report"])
    except (KeyError, TypeError, ValueError) as err:
        raise ShardError(f"{path}: the manifest lacks or garbles {err} (timings_s, report); {rerun}") from None
    phrases = json.loads(blobs["phrases.json"])
    return IndexPart(ids, per_passage, report, phrases, vectors, timings)


def merge_shards(
    root: str | Path,
    corpus: Corpus,
    questions: QASet | list[Question],
    extractor: Extractor,
    embedder: Embedder | None,
    settings: IndexSettings,
    count: int | None = None,
) -> KGIndex:
    """The index of ``corpus`` from the ``count`` shards under ``root`` (None: the one count found there).

    Equal to :func:`~glmrag.index.build.build_index` of the same inputs; raises :class:`ShardError` for a
    missing or corrupt shard and for shards of another corpus, extractor or shard settings.
    """
    root = Path(root)
    n = _count(root, count)
    inputs = shard_inputs(corpus, extractor, settings)
    parts = [read_shard(root / Shard(i, n).name, Shard(i, n), corpus, inputs) for i in range(n)]
    return assemble_index(corpus, questions, parts, extractor, resolve_embedder(embedder, settings), settings)
