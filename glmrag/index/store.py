"""Save and load a :class:`~glmrag.index.kg.KGIndex` as a folder of open formats (no pickle anywhere).

The folder holds ``manifest.json`` (what built the index, its format version and the sha256 of every
file) and the files :func:`save_index` lists. A save writes a temporary sibling folder, fsyncs it and
renames it into place, so the final name only ever holds a complete index; replacing an index moves the
old one aside first (a crash between the renames leaves it in a ``.<name>.old-*`` sibling, never a mixed
one). :func:`load_or_build` reads under a shared ``flock`` of ``.<name>.lock`` and builds under an
exclusive one: a reader never sees the gap between the renames, concurrent runs wait for one build, and
the temp folders of killed builds are removed before the next build.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Corpus, QASet, Question
from glmrag.index.build import FORMAT_VERSION, IndexSettings, build_index, expected_manifest
from glmrag.index.embed import Embedder
from glmrag.index.extractors.base import Extractor
from glmrag.index.kg import Adjacency, EntityLink, KGIndex
from glmrag.io import atomic_write_folder, check_writable, file_lock

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"


class StaleIndexError(RuntimeError):
    """The folder holds no usable index for this request: missing, corrupt, of another format or other inputs."""


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _json(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _files_of(index: KGIndex) -> dict[str, bytes]:
    """The serialised files of ``index`` except the manifest."""
    adj = index.adjacency
    ep = index.entity_passages
    files = {
        "entities.json": _json(index.entities),
        "relations.json": _json(index.relations),
        "passage_ids.json": _json(index.passage_ids),
        "triples.npy": _npy(index.triples),
        "adjacency.npz": _npz(indptr=adj.indptr, neighbor=adj.neighbor, edge_type=adj.edge_type, triple=adj.triple),
        "entity_passages.npz": _npz(
            indptr=ep.indptr.astype(np.int64),
            indices=ep.indices.astype(np.int64),
            shape=np.array(ep.shape, dtype=np.int64),
        ),
        "question_links.jsonl": "".join(
            json.dumps({"question_id": qid, "links": [vars(link) for link in links]}, ensure_ascii=False) + "\n"
            for qid, links in index.question_links.items()
        ).encode(),
    }
    if index.passage_facts is not None:
        pf = index.passage_facts
        files["passage_facts.npz"] = _npz(
            indptr=pf.indptr.astype(np.int64),
            indices=pf.indices.astype(np.int64),
            data=pf.data.astype(np.float32),
            shape=np.array(pf.shape, dtype=np.int64),
        )
    if index.entity_embeddings is not None:
        files["entity_embeddings.npy"] = _npy(np.asarray(index.entity_embeddings, dtype=np.float32))
    return files


def save_index(index: KGIndex, folder: str | Path) -> Path:
    """Write ``index`` to ``folder`` atomically (replacing any index there) and return the folder.

    The manifest is ``index.manifest`` plus ``format_version`` and ``files``
    (sha256 of every file), so :func:`load_index` detects truncated or edited files.

    Layout (every array loads with ``allow_pickle=False``)::

        manifest.json          what built the index + format_version + sha256 of every file below
        entities.json          ["entity phrase", ...]           position = entity id
        relations.json         ["relation phrase", ...]         position = relation id
        passage_ids.json       ["p...", ...]                    position = passage column
        triples.npy            (T, 3) int64 (head, relation, tail)
        adjacency.npz          indptr (E+1,), neighbor, edge_type, triple (2T,) int64: both directions,
                               reversed edges typed relation + R (``inverse_<r>``), see kg.Adjacency
        entity_passages.npz    CSR of the (E, P) binary map: indptr, indices, shape
        entity_embeddings.npy  (E, d) float32, only when the index has embeddings
        passage_facts.npz      CSR of the (P, T) passage -> fact counts (indptr, indices, data, shape), only when
                               built from extractions
        question_links.jsonl   {"question_id", "links": [{"mention", "entity", "score"}]} per line
    """
    files = _files_of(index)
    manifest = dict(index.manifest) | {
        "format_version": FORMAT_VERSION,
        "embeddings": "entity_embeddings.npy" in files,
        "passage_facts": "passage_facts.npz" in files,
        "files": {name: _sha(data) for name, data in files.items()},
    }
    files[MANIFEST] = json.dumps(manifest, ensure_ascii=False, indent=1).encode()
    return atomic_write_folder(folder, files)


BASE_FILES = frozenset(
    {
        "entities.json",
        "relations.json",
        "passage_ids.json",
        "triples.npy",
        "adjacency.npz",
        "entity_passages.npz",
        "question_links.jsonl",
    }
)
"""Files every index holds (see the layout above); ``entity_embeddings.npy`` too when it has an embed_model,
``passage_facts.npz`` when it was built from per-passage extractions."""


SAVED_ONLY_KEYS = ("files", "embeddings", "passage_facts")
"""Manifest keys that only a saved index carries (written by :func:`save_index`): a freshly built index and
the same index loaded back differ only in them."""


def content_manifest(manifest: dict) -> dict:
    """``manifest`` without :data:`SAVED_ONLY_KEYS`: what anything keyed on an index (subgraph shards, GNN
    inputs) must hash, so that a built index and the same index loaded back give one key."""
    return {k: v for k, v in manifest.items() if k not in SAVED_ONLY_KEYS}


def required_files(manifest: dict) -> set[str]:
    """The files an index with this manifest must list: all of them, so a dropped entry is never loaded as absent.

    Embeddings are required when the manifest says so (``embeddings``, written since this check exists) or,
    in older manifests, when its settings name an ``embed_model``.
    """
    settings = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
    embeddings = manifest.get("embeddings", bool(settings.get("embed_model")))
    optional = {"entity_embeddings.npy": embeddings, "passage_facts.npz": manifest.get("passage_facts", False)}
    return set(BASE_FILES) | {name for name, present in optional.items() if present}


def manifest_differences(manifest: dict, expect: dict, what: str = "index") -> list[str]:
    """Human-readable ``key: <what> has X, expected Y`` lines, one level into nested dicts."""
    out = []
    for key, want in json.loads(json.dumps(expect)).items():
        have = manifest.get(key)
        if have == want:
            continue
        if isinstance(have, dict) and isinstance(want, dict):
            for sub in sorted(set(have) | set(want)):
                if have.get(sub) != want.get(sub):
                    out.append(f"{key}.{sub}: {what} has {have.get(sub)!r}, expected {want.get(sub)!r}")
        else:
            out.append(f"{key}: {what} has {have!r}, expected {want!r}")
    return out


def read_manifest(folder: str | Path) -> dict:
    """The manifest of the index in ``folder``.

    Raises :class:`StaleIndexError` if it is missing, unreadable or of another ``format_version``.
    """
    path = Path(folder) / MANIFEST
    fix = "rebuild it (glmrag.index.store.load_or_build(..., rebuild=True))"
    if not path.is_file():
        raise StaleIndexError(f"{folder}: no {MANIFEST}, so no complete index is stored there; {fix}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StaleIndexError(f"{path}: unreadable manifest ({err}); {fix}") from err
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        raise StaleIndexError(f"{path}: index format_version {version!r}, this code reads {FORMAT_VERSION}; {fix}")
    return manifest


def load_index(folder: str | Path, expect: dict | None = None) -> KGIndex:
    """Load the index in ``folder``, all or nothing.

    Raises :class:`StaleIndexError`, saying what differs and how to rebuild,
    when the manifest is missing, corrupt or of another ``format_version``,
    when an entry of ``expect`` (e.g. from :func:`~glmrag.index.build.expected_manifest`)
    differs from the manifest, or when a file is missing or fails its checksum.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    if expect and (diffs := manifest_differences(manifest, expect)):
        raise StaleIndexError(
            f"{folder}: the index was built from other inputs:\n  "
            + "\n  ".join(diffs)
            + "\nrebuild it with load_or_build(..., rebuild=True) (or delete the folder)"
        )
    listed = manifest.get("files")
    required = required_files(manifest)
    if not isinstance(listed, dict) or set(listed) != required:
        listed = set(listed) if isinstance(listed, dict) else set()
        raise StaleIndexError(
            f"{folder / MANIFEST}: lists files {sorted(listed)}, but this index format needs exactly "
            f"{sorted(required)} (missing: {sorted(required - listed)}, unexpected: {sorted(listed - required)}); "
            "the index is incomplete, rebuild it"
        )
    data: dict[str, bytes] = {}
    for name, sha in listed.items():
        path = folder / name
        blob = path.read_bytes() if path.is_file() else None
        if blob is None or _sha(blob) != sha:
            raise StaleIndexError(
                f"{path}: {'missing' if blob is None else 'checksum mismatch'}; the index is corrupt, rebuild it"
            )
        data[name] = blob
    try:
        return _decode(data, manifest)
    except (KeyError, ValueError, TypeError) as err:
        raise StaleIndexError(f"{folder}: unreadable index files ({err!r}); rebuild it") from err


def _decode(data: dict[str, bytes], manifest: dict) -> KGIndex:
    def npy(name: str) -> np.ndarray:
        return np.load(io.BytesIO(data[name]), allow_pickle=False)

    def npz(name: str) -> dict[str, np.ndarray]:
        with np.load(io.BytesIO(data[name]), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def csr(name: str) -> sp.csr_matrix:
        m = npz(name)
        data = m["data"] if "data" in m else np.ones(len(m["indices"]), dtype=np.float32)  # binary maps store none
        return sp.csr_matrix((data, m["indices"], m["indptr"]), shape=tuple(int(x) for x in m["shape"]))

    links = {}
    for line in data["question_links.jsonl"].decode().splitlines():
        row = json.loads(line)
        links[row["question_id"]] = [
            EntityLink(str(x["mention"]), int(x["entity"]), float(x["score"])) for x in row["links"]
        ]
    index = KGIndex(
        entities=json.loads(data["entities.json"]),
        relations=json.loads(data["relations.json"]),
        triples=npy("triples.npy"),
        passage_ids=json.loads(data["passage_ids.json"]),
        entity_passages=csr("entity_passages.npz"),
        entity_embeddings=npy("entity_embeddings.npy") if "entity_embeddings.npy" in data else None,
        question_links=links,
        manifest=manifest,
        passage_facts=csr("passage_facts.npz") if "passage_facts.npz" in data else None,
    )
    adj = npz("adjacency.npz")
    adjacency = Adjacency(adj["indptr"], adj["neighbor"], adj["edge_type"], adj["triple"])
    if len(adjacency.indptr) != index.num_entities + 1 or len(adjacency.neighbor) != 2 * len(index.triples):
        raise ValueError("adjacency.npz does not match the entities and triples")
    index.__dict__["adjacency"] = adjacency  # fills the cached_property: no recomputation
    return index


WAITED = "the index build lock (raise index.lock_timeout to wait longer)"
"""How a lock timeout names the index lock and its setting."""


def load_or_build(
    folder: str | Path,
    corpus: Corpus,
    questions: QASet | Sequence[Question],
    extractor: Extractor,
    embedder: Embedder | None = None,
    settings: IndexSettings | None = None,
    rebuild: bool | None = None,
    lock_timeout: float | None = None,
    build: Callable[[], KGIndex] | None = None,
) -> KGIndex:
    """The index of these inputs: loaded from ``folder`` when it matches, else built and saved there.

    ``rebuild=None`` builds a missing index and rebuilds a stale one (logging why at WARNING);
    ``True`` always rebuilds; ``False`` never does and raises :class:`StaleIndexError` instead.
    A folder that could not be written raises ``PermissionError`` before the build, not after it. A run
    waits for another's build; after ``lock_timeout`` seconds (None: no limit) it raises
    :class:`~glmrag.io.LockTimeout` (a builder stopped by Ctrl+Z holds the lock until it resumes).
    ``build`` makes the index when one is needed (default: :func:`~glmrag.index.build.build_index` of these
    inputs; the merge of a sharded build passes its own, :mod:`glmrag.index.shards`).
    """
    settings = settings or IndexSettings()
    folder = Path(folder)
    expect = expected_manifest(corpus, questions, extractor, settings)
    lock = folder.parent / f".{folder.name}.lock"
    if rebuild is not True:
        with file_lock(lock, shared=True, timeout=lock_timeout, what=WAITED):  # no writer replaces it while read
            try:
                return load_index(folder, expect)
            except StaleIndexError as err:
                if rebuild is False:
                    raise
                reason = err
    # fail before minutes of building when the result could not be saved
    check_writable(folder.parent, "index cache")
    with file_lock(lock, timeout=lock_timeout, what=WAITED):  # one build per folder: a concurrent run waits here
        if rebuild is not True:
            try:
                index = load_index(folder, expect)
                log.info("index at %s was built by another run while this one waited", folder)
                return index
            except StaleIndexError:
                pass
            if (folder / MANIFEST).exists():
                log.warning("rebuilding the index at %s: %s", folder, reason)
            else:
                log.info("no index at %s yet; building it", folder)
        remove_stale_temps(folder)
        index = build() if build is not None else build_index(corpus, questions, extractor, embedder, settings)
        save_index(index, folder)
    return index


def remove_stale_temps(folder: Path) -> list[Path]:
    """Delete ``.<name>.tmp-*`` / ``.<name>.old-*`` siblings that killed builds left (call under the build lock)."""
    stale = [p for pattern in (".tmp-*", ".old-*") for p in folder.parent.glob(f".{folder.name}{pattern}")]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    if stale:
        log.info("removed %d temp folders left by killed builds of %s", len(stale), folder)
    return stale
