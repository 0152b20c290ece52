"""The GNN's question records as LitData chunks (``KGQADataModule(store="litdata")``): written once by
LitData's writer, the same batches as the in-memory records, every question once per epoch across 2 ranks x 2
DataLoader workers, read from a folder or from an S3-compatible server."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from glmrag.datamodules.chunk_records import chunk_list
from glmrag.datamodules.gnn_datamodule import KGQADataModule
from tests.datamodules.test_chunk_records import s3_server, upload  # noqa: F401 (s3_server: a fixture)

pytestmark = pytest.mark.usefixtures("glmrag_cache", "tiny_musique")


def make(index_config, **kwargs) -> KGQADataModule:
    return KGQADataModule("musique_tiny", index=index_config(), **{"batch_size": 4, "seed": 3} | kwargs)


def ready(dm: KGQADataModule, rank: int = 0, world_size: int = 1) -> KGQADataModule:
    """``dm`` prepared and set up as rank ``rank`` of ``world_size`` sees it (a stand-in for the trainer)."""
    dm.trainer = SimpleNamespace(world_size=world_size, global_rank=rank, fit_loop=None)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def batches(dm: KGQADataModule, split: str, epoch: int = 0) -> list[dict]:
    loader = getattr(dm, f"{split}_dataloader")()
    loader.sampler.set_epoch(epoch)
    return list(loader)


def assert_same_batches(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want) and got
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for name, value in b.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(a[name], value), name
            else:
                assert a[name] == value, name


def test_chunks_give_the_batches_of_the_records_in_memory(index_config, tmp_path):
    memory = ready(make(index_config))
    chunks = ready(make(index_config, store="litdata", records_dir=str(tmp_path), chunk_size=3, write_workers=2))
    (folder,) = {p.parent for p in tmp_path.rglob("index.json") if p.parent.name == "train"}
    assert sum(c["count"] for c in chunk_list(folder)) == len(memory.records["train_split"])
    assert not memory.records["train_split"].records[0].question_emb  # in memory: looked up by id
    for split, epoch in [("train", 0), ("train", 1), ("val", 0), ("test", 0)]:
        assert_same_batches(batches(chunks, split, epoch), batches(memory, split, epoch))
    again = ready(make(index_config, store="litdata", records_dir=str(tmp_path), num_workers=2))  # found, not rewritten
    assert_same_batches(batches(again, "train", 1), batches(memory, "train", 1))
    with pytest.raises(ValueError, match="needs datamodule.store=litdata"):
        make(index_config, records_url="s3://bucket/x")
    with pytest.raises(ValueError, match="datamodule.store"):
        make(index_config, store="zarr")
    # probes of issue 50, refused when the DataModule is built, before any index or chunk is written
    with pytest.raises(ValueError, match="datamodule.storage_options='abc': must be a mapping"):
        make(index_config, store="litdata", storage_options="abc")
    (afile := tmp_path / "afile").write_text("")
    with pytest.raises(NotADirectoryError, match=f"datamodule.records_dir={afile} is a file"):
        make(index_config, store="litdata", records_dir=str(afile))
    # an endpoint nobody listens on: LitData's client retried for about 6 minutes, then blamed the split
    closed = {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1", "aws_access_key_id": "k"}
    closed["aws_secret_access_key"] = "s"
    with pytest.raises(ConnectionError, match=r"records_url=s3://glm/x: cannot reach http://127.0.0.1:9 \("):
        make(index_config, store="litdata", records_url="s3://glm/x", storage_options=closed)
    with pytest.raises(FileNotFoundError, match=f"records_url={tmp_path / 'nowhere'}: no such folder"):
        make(index_config, store="litdata", records_url=str(tmp_path / "nowhere"))


def test_two_ranks_by_two_workers_see_every_question_once(index_config, tmp_path):
    memory = ready(make(index_config))
    want = Counter(r.question_id for r in memory.records["train_split"].records)
    for epoch in (0, 1):
        seen, steps = Counter(), []
        for rank in (0, 1):
            dm = make(index_config, store="litdata", records_dir=str(tmp_path), num_workers=2)
            got = batches(ready(dm, rank, world_size=2), "train", epoch)
            steps.append(len(got))
            for batch in got:
                seen.update(q for q, real in zip(batch["question_ids"], batch["real"].tolist(), strict=True) if real)
        assert steps[0] == steps[1]  # equal epochs: no DDP hang
        # 10 training questions in global batches of 4, 4 and 2 split evenly over the 2 ranks: no batch is
        # topped up with repeats (KGBatchSampler), so every question exactly once
        assert len(want) == 10 and seen == want


@pytest.mark.integration  # the S3 test server
def test_the_records_are_read_from_a_url(index_config, s3_server, tmp_path):  # noqa: F811
    client, endpoint = s3_server
    local = ready(make(index_config, store="litdata", records_dir=str(tmp_path / "local")))
    remote_args = {
        "store": "litdata",
        "records_url": "s3://glm/gnn_chunks",
        "storage_options": {"endpoint_url": endpoint},
    }
    remote = make(index_config, records_dir=str(tmp_path / "elsewhere"), **remote_args)
    remote.prepare_data()  # writes no records
    assert not (tmp_path / "elsewhere").exists()
    with pytest.raises(FileNotFoundError, match="records_url='s3://glm/gnn_chunks' lacks a split"):
        ready(remote)
    upload(client, tmp_path / "local", "gnn_chunks")
    remote = ready(make(index_config, records_dir=str(tmp_path / "elsewhere"), **remote_args))
    for split in ("train", "val"):
        assert_same_batches(batches(remote, split), batches(local, split))
    assert not Path(tmp_path / "elsewhere").exists()
