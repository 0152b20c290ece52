"""Question records as LitData chunks: written in parallel by LitData's writer, read from a folder or a URL.

LitData (``litdata``, Lightning's streaming library) stores the records: :func:`write_chunks` runs its
``optimize`` (one process per worker, chunks of ``chunk_size`` records, an ``index.json``), and
:class:`ChunkShards` reads them through its ``StreamingDataset``, from a local folder or from object storage
by URL (``s3://``, ``gs://``, ``azure://``; chunks are downloaded to a local cache as they are needed).
LitData's index records each chunk's size, not a checksum, and its reader checks only that a chunk file is
that large: :func:`write_chunks` adds each chunk file's SHA-256 to ``index.json``, and :class:`ChunkShards`
checks a chunk file against it before the chunk's first record is decoded in a process.

Which records a rank and a DataLoader worker read stays with
:class:`~glmrag.datamodules.shard_stream.RankStream`, the chunks being its shards. LitData's own sampler is not
used: in a distributed run it forces ``drop_last`` (its docstring: "set to True in a distributed setting"),
so the last records of every epoch go unseen, whereas RankStream gives every record exactly once per epoch,
equal batch counts on every rank (pads, ``real=False``) and the exact mid-epoch resume of
:mod:`glmrag.datamodules.resumable`.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch

from glmrag.io import atomic_write_text, cache_root

JSON_FIELDS = ("gold",)
"""Record fields of variable-length Python lists, stored as JSON text: LitData flattens a record into one
value per leaf, so a list's length would change the layout from record to record."""
INDEX = "index.json"


def default_chunk_cache() -> str:
    """``$GLMRAG_CACHE_DIR/litdata``: where chunks read from object storage are downloaded."""
    return str(cache_root() / "litdata")


def encode(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as LitData stores it (:data:`JSON_FIELDS` as JSON text)."""
    return {**record, **{name: json.dumps(list(record[name])) for name in JSON_FIELDS if name in record}}


def decode(item: Mapping[str, Any]) -> dict[str, Any]:
    """A stored record back as :func:`~glmrag.datamodules.glm_inputs.question_record` made it."""
    return {**item, **{name: json.loads(item[name]) for name in JSON_FIELDS if name in item}}


class EncodedRecord:
    """``i -> encode(make(i))``: the function LitData's workers run (picklable when ``make`` is)."""

    def __init__(self, make: Callable[[int], Mapping[str, Any]]) -> None:
        self.make = make

    def __call__(self, i: int) -> dict[str, Any]:
        return encode(self.make(i))


def write_chunks(
    output_dir: str | Path, make: Callable[[int], Mapping[str, Any]], count: int, chunk_size: int, num_workers: int
) -> list[dict[str, Any]]:
    """Write records ``make(0)``, ..., ``make(count - 1)`` as LitData chunks into ``output_dir`` (an empty
    folder) with LitData's ``optimize`` in ``num_workers`` processes, then each chunk file's SHA-256 into
    ``index.json``; returns the chunks (:func:`chunk_list`) in ``index.json`` order, which is the records'
    order (``keep_data_ordered``)."""
    from litdata import optimize

    if chunk_size < 1 or num_workers < 1:
        raise ValueError(f"chunk_size and num_workers must be >= 1, got {chunk_size} and {num_workers}")
    if count:
        # optimize sets the process-wide start method (force=True): put the caller's back, or every later
        # DataLoader of this process would take it (spawn: seconds per worker).
        start_method = multiprocessing.get_start_method(allow_none=True)
        # optimize also moves this process's Python, NumPy and torch random states (measured): put them back, so
        # a run that writes the records draws the same dropout as one that finds them written.
        streams = random.getstate(), np.random.get_state(), torch.get_rng_state()
        try:
            optimize(
                fn=EncodedRecord(make),
                inputs=list(range(count)),  # positions, not the questions: LitData reads str inputs as file paths
                output_dir=str(output_dir),
                chunk_size=chunk_size,
                num_workers=min(num_workers, count),
                keep_data_ordered=True,
                # fork where there is one: the writers inherit the index instead of unpickling it, as the
                # DataLoader's workers do; spawn (LitData's default) re-imports torch in each, seconds apiece.
                start_method="fork" if "fork" in multiprocessing.get_all_start_methods() else None,
                verbose=False,
            )
        finally:
            multiprocessing.set_start_method(start_method, force=True)
            random.setstate(streams[0])
            np.random.set_state(streams[1])
            torch.set_rng_state(streams[2])
    if not count:
        return []
    index = json.loads((Path(output_dir) / INDEX).read_text())
    for chunk in index["chunks"]:
        chunk["sha256"] = sha256(Path(output_dir) / chunk["filename"])
    atomic_write_text(Path(output_dir) / INDEX, json.dumps(index, sort_keys=True))
    return chunk_list(output_dir)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()  # a chunk is a few MB; hashlib.file_digest needs 3.11


def chunk_list(folder: str | Path) -> list[dict[str, Any]]:
    """The chunks (``file``, ``count``, ``sha256``) of a local chunk folder's ``index.json``, in order."""
    index = json.loads((Path(folder) / INDEX).read_text())
    return [
        {"file": chunk["filename"], "count": int(chunk["chunk_size"]), "sha256": chunk.get("sha256")}
        for chunk in index["chunks"]
    ]


class ChunkShards:
    """:class:`~glmrag.datamodules.shard_stream.Shards` over the LitData chunk folders or URLs ``locations``, in
    order: shard ``i`` is the ``i``-th chunk of them all.

    ``storage_options`` go to LitData's client (for S3, boto3's: ``endpoint_url`` for an S3-compatible
    server); ``cache_dir`` is where remote chunks are downloaded (:func:`default_chunk_cache`). Each process
    opens its own ``StreamingDataset``s (a DataLoader worker does not reuse its parent's) and checks each
    chunk it reads once (:meth:`check`).
    """

    def __init__(
        self, locations: Sequence[str], storage_options: Mapping[str, Any] | None = None, cache_dir: str | None = None
    ) -> None:
        self.locations = [str(location) for location in locations]
        self.storage_options = dict(storage_options or {})
        self.cache_dir = cache_dir or default_chunk_cache()
        self._datasets: dict[int, Any] = {}
        self._checked: set[int] = set()
        self._pid = os.getpid()
        self.counts: list[int] = []
        self._chunks: list[tuple[int, int, dict[str, Any]]] = []
        """Shard -> (location, index of its first record in that location's dataset, its chunk_list entry)."""
        for i in range(len(self.locations)):
            first = 0
            for chunk in chunk_list(self.dataset(i).input_dir.path):  # the index LitData fetched
                self._chunks.append((i, first, chunk))
                self.counts.append(chunk["count"])
                first += chunk["count"]

    def location_counts(self) -> list[int]:
        """The number of records at each of :attr:`locations`."""
        counts = [0] * len(self.locations)
        for (location, _, _), count in zip(self._chunks, self.counts, strict=True):
            counts[location] += count
        return counts

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_datasets": {}, "_checked": set()}  # each process opens and checks its own

    def dataset(self, i: int) -> Any:
        """The ``StreamingDataset`` of location ``i`` in this process."""
        from litdata import StreamingDataset

        if self._pid != os.getpid():  # a forked worker: its parent's datasets hold the parent's clients
            self._datasets, self._checked, self._pid = {}, set(), os.getpid()
        if i not in self._datasets:
            use_plain_http_endpoints()
            location = self.locations[i]
            remote = "://" in location
            if not remote and not (Path(location) / INDEX).is_file():
                raise FileNotFoundError(f"{Path(location) / INDEX}: not a LitData chunk folder (no {INDEX})")
            try:
                self._datasets[i] = StreamingDataset(
                    location, cache_dir=self.cache_dir if remote else None, storage_options=self.storage_options
                )
            except Exception as err:  # botocore's ClientError, a GCS or Azure error: each client has its own
                if not remote:
                    raise
                raise FileNotFoundError(f"{location}/{INDEX}: cannot read it ({type(err).__name__}: {err})") from err
            # Whole chunks, fetched once into cache_dir: by default an integer index makes LitData fetch each
            # record alone (a ranged request per record from a URL). Its public setter needs the cache its first
            # read makes, and turning it off after that read stalled the first chunk for 30 s (measured), so the
            # flag is set before the cache exists (LitData 0.2.76, pinned).
            self._datasets[i]._on_demand_bytes = False
        return self._datasets[i]

    def check(self, shard: int) -> None:
        """Raise an OSError naming chunk ``shard``'s file unless that file has the SHA-256 written with it; once
        per process. A chunk of a URL not fetched yet is checked at the next call, after LitData's read."""
        if shard in self._checked:
            return
        location, _, chunk = self._chunks[shard]
        path = Path(self.dataset(location).input_dir.path) / chunk["file"]
        if "://" in self.locations[location] and not path.exists():
            return
        if not path.is_file() or sha256(path) != chunk["sha256"]:
            raise OSError(
                f"{path}: chunk missing, truncated or corrupt (its SHA-256 is not the one {INDEX} records): delete "
                f"the split folder {self.locations[location]} and write it again"
            )
        self._checked.add(shard)

    def rows(self, shard: int, start: int, stop: int) -> Iterator[dict[str, Any]]:
        location, first, _ = self._chunks[shard]
        stop = min(stop, self.counts[shard])
        if start >= stop:
            return
        dataset = self.dataset(location)
        self.check(shard)  # a local chunk, before LitData reads it
        for row in range(first + start, first + stop):  # not a slice: LitData clips one to this rank's share
            item = dataset[row]
            self.check(shard)  # a chunk of a URL, once LitData's read has fetched it
            yield decode(item)


def check_record_store(records_dir: str | Path | None, records_url: str | None, storage_options: Any, key: str) -> None:
    """Refuse, before any index or chunk is written, a chunk store that cannot work: ``storage_options`` that
    is not a mapping, a file as the local folder (``<key>``), or a ``records_url`` that cannot be reached
    (:func:`check_records_url`)."""
    if not isinstance(storage_options, Mapping):
        raise ValueError(
            f"datamodule.storage_options={storage_options!r}: must be a mapping of LitData client options "
            "(e.g. {endpoint_url: http://...}) or null"
        )
    if records_dir is not None and Path(records_dir).exists() and not Path(records_dir).is_dir():
        raise NotADirectoryError(f"datamodule.{key}={records_dir} is a file; give a folder for the chunks")
    if records_url is not None:
        check_records_url(records_url, storage_options)


URL_TIMEOUT_S = 10
"""How long the check of a ``records_url`` waits for its server, once (engineering choice: LitData's own client
retries for minutes before it names the split)."""


def check_records_url(records_url: str, storage_options: Mapping[str, Any]) -> None:
    """A ``records_url`` that cannot be read is a ConnectionError or FileNotFoundError naming it, the endpoint
    and the fix: an ``s3://`` bucket is asked for one key under the prefix, once, within :data:`URL_TIMEOUT_S`;
    a local path (no scheme, or ``file://``) must be a folder. Other schemes are left to LitData."""
    url = urlparse(records_url)
    if url.scheme in ("", "file"):
        if not Path(url.path).is_dir():
            raise FileNotFoundError(f"datamodule.records_url={records_url}: no such folder")
        return
    if url.scheme != "s3":
        return
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    options = {k: v for k, v in storage_options.items() if k not in ("data_connection_id", "config")}  # as LitData
    endpoint = options.get("endpoint_url") or "AWS S3"
    config = Config(connect_timeout=URL_TIMEOUT_S, read_timeout=URL_TIMEOUT_S, retries={"max_attempts": 1})
    try:
        client = boto3.client("s3", config=config, **options)
        client.list_objects_v2(Bucket=url.netloc, Prefix=url.path.lstrip("/"), MaxKeys=1)
    except ClientError as err:
        raise FileNotFoundError(
            f"datamodule.records_url={records_url}: {endpoint} refused the listing ({err}); check the bucket, "
            "the prefix and the credentials"
        ) from None
    except (BotoCoreError, TypeError, ValueError) as err:  # unreachable endpoint, no credentials, bad options
        raise ConnectionError(
            f"datamodule.records_url={records_url}: cannot reach {endpoint} ({err}); check "
            "datamodule.storage_options (endpoint_url, credentials) and the network"
        ) from None


def split_location(folder: Path, written_to: Path, records_url: str | None) -> str:
    """Where the split written to ``folder`` (under ``written_to``) is read from: ``folder`` itself, or its
    place under ``records_url`` (a copy of ``written_to`` in object storage)."""
    if records_url is None:
        return str(folder)
    return "/".join([records_url.rstrip("/"), *folder.relative_to(written_to).parts])


def open_splits(
    locations: Sequence[str], storage_options: Mapping[str, Any], records_url: str | None, written_to: Path
) -> ChunkShards:
    """:class:`ChunkShards` of the split ``locations``; a split missing under ``records_url`` is a
    FileNotFoundError that says how to put it there (a local folder is checked before, by its ``meta.json``)."""
    try:
        return ChunkShards(locations, storage_options, default_chunk_cache())
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{err}; datamodule.records_url={records_url!r} lacks a split of these settings: write it once "
            f"without records_url (into {written_to}) and copy that folder there"
        ) from err


def use_plain_http_endpoints() -> None:
    """Let LitData read ``s3://`` URLs from an S3-compatible server over plain http (a MinIO in a cluster, the
    tests' moto server): it fetches whole chunks with obstore, whose client refuses ``http://`` unless told
    ``allow_http``, which LitData never tells it; for such an endpoint, chunks are fetched with boto3 instead
    (LitData's own client, which LitData already uses for the index). Idempotent; call in each process."""
    from litdata.streaming import downloader

    if getattr(downloader._DOWNLOADERS.get("s3://"), "plain_http_aware", False):
        return

    class S3Downloader(downloader.S3Downloader):
        plain_http_aware = True

        def download_file(self, remote_filepath: str, local_filepath: str) -> None:
            endpoint = self._client.client.meta.endpoint_url or ""
            if not endpoint.startswith("http://"):
                return super().download_file(remote_filepath, local_filepath)
            if os.path.exists(local_filepath):
                return None
            url = urlparse(remote_filepath)
            partial = f"{local_filepath}.{os.getpid()}.part"  # renamed whole: a reader never sees half a chunk
            os.makedirs(os.path.dirname(local_filepath) or ".", exist_ok=True)
            self._client.client.download_file(url.netloc, url.path.lstrip("/"), partial)
            os.replace(partial, local_filepath)
            return None

    downloader.register_downloader("s3://", S3Downloader, overwrite=True)
