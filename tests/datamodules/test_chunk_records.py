"""LitData chunks (glmrag.datamodules.chunk_records): written by LitData's writer, streamed by RankStream from a
folder or an S3-compatible server, every record exactly once per epoch across 2 ranks x 2 DataLoader workers."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from glmrag.datamodules.chunk_records import ChunkShards, chunk_list, decode, encode, write_chunks
from glmrag.datamodules.shard_stream import RankStream, StreamBatchSampler
from glmrag.datamodules.subgraph_data import SubgraphDataModule, write_chunk_split
from glmrag.index.synthetic import random_kg
from tests.datamodules.test_subgraph_data import make_dm, synthetic_records, tok  # noqa: F401 (tok: a fixture)

pytestmark = pytest.mark.usefixtures("glmrag_cache")
COUNT = 23  # not a multiple of the chunk size, the batch size or the 4 parts of 2 ranks x 2 workers


@pytest.fixture(scope="module")
def records(tok):  # noqa: F811
    return synthetic_records(random_kg(60, 150, seed=3), tok, "a", COUNT)


@pytest.fixture(scope="module")
def stores(records, tmp_path_factory):
    """The records as LitData chunks of 5 written by 2 processes: ``(folder, meta)``."""
    folder = tmp_path_factory.mktemp("stores") / "chunks"
    return folder, write_chunk_split(folder, records.__getitem__, COUNT, 5, 2, {})


@pytest.fixture(scope="module")
def one_writer(records, tmp_path_factory):
    """The records as LitData chunks of 5 written by one process."""
    folder = tmp_path_factory.mktemp("one_writer") / "chunks"
    write_chunk_split(folder, records.__getitem__, COUNT, 5, 1, {})
    return folder


def assert_same_record(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(np.asarray(got[name]), value, err_msg=name)
        else:
            assert got[name] == value, name


def test_chunks_hold_the_records_in_order(records, stores):
    folder, meta = stores
    assert meta["count"] == COUNT and meta["stats"] == {
        "without_nodes": sum(len(r["entity_of_node"]) == 0 for r in records),
        "without_target_nodes": sum(len(r["target_nodes"]) == 0 for r in records),
        "truncated": sum(r["truncated"] for r in records),
        "max_tokens": max(r["num_tokens"] for r in records),
        "total_tokens": sum(r["num_tokens"] for r in records),
    }
    assert meta["shards"] == chunk_list(folder) and sum(c["count"] for c in meta["shards"]) == COUNT
    assert all(c["count"] <= 5 for c in meta["shards"])
    shards = ChunkShards([str(folder)])
    read = [r for shard, n in enumerate(shards.counts) for r in shards.rows(shard, 0, n)]
    assert [r["question_id"] for r in read] == [r["question_id"] for r in records]  # kept in order by 2 writers
    for got, want in zip(read, records, strict=True):
        assert_same_record(got, want)
    assert [r["question_id"] for r in shards.rows(1, 2, 99)] == [r["question_id"] for r in read[7:10]]
    assert decode(encode({"gold": ("p1", "p2")})) == {"gold": ["p1", "p2"]}
    assert [p.name for p in folder.parent.iterdir()] == ["chunks"]  # no temporary folder left


def test_writing_leaves_the_callers_random_streams_and_start_method(records, tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    states = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state()
    method = multiprocessing.get_start_method(allow_none=True)
    write_chunks(tmp_path / "chunks", records.__getitem__, COUNT, 5, 2)
    assert multiprocessing.get_start_method(allow_none=True) == method  # LitData's writer set it: put back
    assert random.getstate() == states[0] and (np.random.get_state()[1] == states[1]).all()
    assert torch.equal(torch.get_rng_state(), states[2])  # LitData's writer moved all three: put back


def test_nothing_to_write_and_bad_sizes(tmp_path):
    assert write_chunks(tmp_path / "none", lambda i: {}, 0, 5, 2) == []
    with pytest.raises(ValueError, match="chunk_size"):
        write_chunks(tmp_path / "x", lambda i: {}, 3, 0, 1)
    with pytest.raises(FileNotFoundError, match="not a LitData chunk folder"):
        ChunkShards([str(tmp_path)])


def as_is(batch: list[dict]) -> list[dict]:
    return batch


def batches_of(stream: RankStream, epoch: int, workers: int) -> list[list[tuple[str, bool]]]:
    """One epoch of ``stream`` through a DataLoader with ``workers`` worker processes."""
    sampler = StreamBatchSampler(len(stream), num_replicas=stream.world_size, rank=stream.rank)
    sampler.set_epoch(epoch)
    loader = DataLoader(stream, sampler=sampler, batch_size=None, collate_fn=as_is, num_workers=workers)
    return [[(r["question_id"], bool(r["real"])) for r in batch] for batch in loader]


def test_in_order_the_cuts_do_not_matter(stores, one_writer):
    """One writer cuts the records 5, 5, 5, 5, 3; two writers 5, 5, 1 | 5, 5, 2: the same batches in order
    (a shuffled epoch's order follows the cuts)."""
    folder, _ = stores
    assert [c["count"] for c in chunk_list(one_writer)] == [5, 5, 5, 5, 3]
    assert [c["count"] for c in chunk_list(folder)] == [5, 5, 1, 5, 5, 2]  # 11 and 12 records per writer
    for rank in (0, 1):
        one, two = (RankStream(ChunkShards([str(f)]), 2, rank, 2, readers=2) for f in (one_writer, folder))
        assert batches_of(two, 0, 0) == batches_of(one, 0, 0)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_chunk_is_named_not_read(one_writer, tmp_path, damage):
    folder = tmp_path / "chunks"
    shutil.copytree(one_writer, folder)
    chunk = folder / chunk_list(folder)[1]["file"]
    data = bytearray(chunk.read_bytes())
    if damage == "flip":
        data[-1] ^= 0x01  # a byte of the chunk's last record
    else:
        del data[len(data) // 2 :]
    chunk.write_bytes(bytes(data))
    shards = ChunkShards([str(folder)])
    assert len(list(shards.rows(0, 0, 5))) == 5  # the other chunks read as before
    with pytest.raises(OSError, match=rf"{chunk.name}: chunk missing, truncated or corrupt"):
        next(shards.rows(1, 0, 5))


def assert_exactly_once(shards_of_rank, records) -> None:
    """2 ranks x 2 DataLoader workers over one training epoch: every record real exactly once, equal batches."""
    per_rank = []
    for rank in (0, 1):
        stream = RankStream(shards_of_rank(), 2, rank=rank, world_size=2, readers=2, shuffle=True, seed=3)
        per_rank.append(batches_of(stream, 1, workers=2))
    assert len(per_rank[0]) == len(per_rank[1])  # equal epochs: no DDP hang
    real = Counter(q for batches in per_rank for batch in batches for q, is_real in batch if is_real)
    assert real == Counter(r["question_id"] for r in records)


def test_two_ranks_by_two_workers_see_every_record_once(stores, records):
    folder, _ = stores
    assert_exactly_once(lambda: ChunkShards([str(folder)]), records)


DDP_SCRIPT = """
import json, os, sys
import torch.distributed as dist
from torch.utils.data import DataLoader
from glmrag.datamodules.chunk_records import ChunkShards
from glmrag.datamodules.shard_stream import RankStream, StreamBatchSampler

rank, folder, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", rank=rank, world_size=2)  # LitData reads the world from the process group
stream = RankStream(ChunkShards([folder]), 2, rank=rank, world_size=2, readers=2, shuffle=True, seed=3)
sampler = StreamBatchSampler(len(stream), num_replicas=2, rank=rank)
sampler.set_epoch(1)
loader = DataLoader(stream, sampler=sampler, batch_size=None, collate_fn=lambda b: b, num_workers=2)
rows = [(r["question_id"], bool(r["real"])) for batch in loader for r in batch]
with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
    json.dump({"batches": len(loader), "rows": rows}, f)
dist.destroy_process_group()
"""


def test_two_gloo_ranks_see_every_record_once(stores, records, tmp_path):
    """Under a real process group (LitData then splits its own length per rank): every record exactly once."""
    folder, _ = stores
    script = tmp_path / "ranks.py"
    script.write_text(DDP_SCRIPT)
    env = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    procs = [
        subprocess.Popen([sys.executable, str(script), str(r), str(folder), str(tmp_path)], env=env, cwd=tmp_path)
        for r in (0, 1)
    ]
    assert [proc.wait(timeout=600) for proc in procs] == [0, 0]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["batches"] == ranks[1]["batches"]
    real = Counter(q for rank in ranks for q, is_real in rank["rows"] if is_real)
    assert real == Counter(r["question_id"] for r in records)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- object storage: a local S3-compatible server (moto's) started by the test ------------------------------


@pytest.fixture
def s3_server(monkeypatch):
    """``(client, endpoint)`` of an in-process moto S3 server with an empty bucket ``glm``."""
    boto3 = pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="glm")
        yield client, endpoint
    finally:
        server.stop()


def upload(client, folder: Path, prefix: str) -> None:
    """What ``aws s3 sync <folder> s3://glm/<prefix>`` does."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), "glm", f"{prefix}/{path.relative_to(folder).as_posix()}")


@pytest.mark.integration  # a local S3 server (4 s); the chunk reads from a folder stay quick
def test_ranks_and_workers_read_chunks_from_object_storage(stores, records, s3_server, tmp_path):
    client, endpoint = s3_server
    folder, _ = stores
    upload(client, folder, "records/a")
    options = {"endpoint_url": endpoint}
    url = "s3://glm/records/a"
    shards = ChunkShards([url], options, cache_dir=str(tmp_path / "downloads"))
    assert shards.counts == [c["count"] for c in chunk_list(folder)]
    assert_exactly_once(lambda: ChunkShards([url], options, cache_dir=str(tmp_path / "downloads")), records)
    assert any(tmp_path.joinpath("downloads").rglob("*.bin"))  # chunks were downloaded to the local cache
    name = chunk_list(folder)[1]["file"]
    flipped = bytearray((folder / name).read_bytes())
    flipped[-1] ^= 0x01
    client.put_object(Bucket="glm", Key=f"records/a/{name}", Body=bytes(flipped))
    with pytest.raises(OSError, match=rf"{name}: chunk missing, truncated or corrupt"):  # checked once fetched
        list(ChunkShards([url], options, cache_dir=str(tmp_path / "again")).rows(1, 0, 5))


@pytest.mark.integration  # the S3 test server
def test_the_datamodule_reads_its_splits_from_a_url(index_config, s3_server, tmp_path, monkeypatch):
    client, endpoint = s3_server
    local = make_dm(index_config, tmp_path / "local")
    local.prepare_data()
    local.setup("fit")
    remote_args = {
        "records_url": "s3://glm/glm_chunks/",
        "storage_options": {"endpoint_url": endpoint},
    }
    remote = make_dm(index_config, tmp_path / "elsewhere", **remote_args)
    remote.prepare_data()  # writes no records
    assert not (tmp_path / "elsewhere").exists()
    with pytest.raises(FileNotFoundError, match="records_url='s3://glm/glm_chunks/' lacks a split"):
        remote.setup("fit")
    upload(client, tmp_path / "local", "glm_chunks")
    remote = make_dm(index_config, tmp_path / "elsewhere", **remote_args)
    remote.setup("fit")
    assert remote.splits["train_split"][0]["folder"].startswith("s3://glm/glm_chunks/h2-t50-")
    got = [b["question_ids"] for b in remote.val_dataloader()]
    assert got == [b["question_ids"] for b in local.val_dataloader()]
    assert isinstance(remote, SubgraphDataModule) and os.environ["AWS_ACCESS_KEY_ID"] == "test"
