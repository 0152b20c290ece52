"""SubgraphDataModule: chunks written once, streamed once per epoch, equal batch counts on every rank."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from glmrag.data.registry import load_dataset
from glmrag.data.types import Question
from glmrag.datamodules.chunk_records import INDEX, ChunkShards
from glmrag.datamodules.glm_inputs import SubgraphSettings, load_tokenizer, question_record
from glmrag.datamodules.gnn_input_cache import cached_question_embeddings, default_inputs_cache_dir
from glmrag.datamodules.shard_stream import RankStream, StreamBatchSampler
from glmrag.datamodules.subgraph_data import META, SubgraphDataModule, read_meta, write_chunk_split
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.kg import EntityLink
from glmrag.index.synthetic import random_kg
from glmrag.jobs.common import instantiate_datamodule

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 9
pytestmark = pytest.mark.usefixtures("glmrag_cache")  # GLMRAG_CACHE_DIR set for the whole module


# --- RankStream on synthetic records ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DEFAULT_MODEL)


def synthetic_records(index, tok, kg_name: str, n: int) -> list[dict]:
    """Records of ``n`` questions ``<kg_name>-q<i>`` with two random seed entities each."""
    rng = np.random.default_rng(n)
    records = []
    for i in range(n):
        qid = f"{kg_name}-q{i}"
        index.question_links[qid] = [EntityLink(f"m{e}", int(e), 1.0) for e in rng.choice(60, 2, replace=False)]
        q = Question(qid, f"question {i}", ("a",), ("p0", "p1"))
        records.append(question_record(index, q, kg_name, tok, SubgraphSettings(max_triplets=8), np.zeros(4)))
    return records


@pytest.fixture(scope="module")
def shards(tmp_path_factory, tok) -> Path:
    """Two KGs' records in chunks of 3: ``a`` 7 records (3 chunks), ``b`` 1 record; returns their root."""
    root = tmp_path_factory.mktemp("shards")
    for seed, (name, n) in enumerate((("a", 7), ("b", 1))):
        records = synthetic_records(random_kg(60, 150, seed=seed), tok, name, n)
        write_chunk_split(root / name, records.__getitem__, n, 3, 1, {"dataset": name})
    return root


def chunks(root: Path, names=("a", "b")) -> ChunkShards:
    return ChunkShards([str(root / name) for name in names])


def stream_ids(stream: RankStream, epoch: int) -> list[tuple[str, bool]]:
    return [(r["question_id"], r["real"]) for b in range(len(stream)) for r in stream[(epoch, b)]]


def test_rank_stream_in_order_without_shuffle(shards):
    stream = RankStream(chunks(shards), batch_size=3)
    assert stream.counts == [3, 3, 1, 1]
    expected = [(f"a-q{i}", True) for i in range(7)] + [("b-q0", True)]
    assert len(stream) == 3 and stream_ids(stream, 0) == expected
    assert [len(stream[(0, b)]) for b in range(3)] == [3, 3, 2]
    assert [r["kg"] for r in stream[(0, 2)]] == ["a", "b"]  # a batch may mix KGs
    assert stream[(0, 1)][0]["question_id"] == "a-q3"  # going back restarts the pass
    with pytest.raises(IndexError):
        stream[(0, 3)]


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("readers", [1, 2, 3])
@pytest.mark.parametrize("train", [False, True])
def test_ranks_and_workers_each_read_only_their_own_part(shards, world, readers, train):
    everything = sorted([f"a-q{i}" for i in range(7)] + ["b-q0"])
    stored = chunks(shards)
    ids = [[r["question_id"] for r in stored.rows(shard, 0, n)] for shard, n in enumerate(stored.counts)]
    opened: list[int] = []
    rows_of = stored.rows
    stored.rows = lambda shard, a, z: (opened.append(shard), rows_of(shard, a, z))[1]
    args = {"world_size": world, "readers": readers, "shuffle": train, "seed": 4, "pad_real": train}
    ranks = [RankStream(stored, 2, rank=r, **args) for r in range(world)]
    assert len({len(s) for s in ranks}) == 1  # equal batch counts on every rank
    own, padding = [], []
    for stream in ranks:
        for reader in range(readers):
            opened.clear()
            # worker `reader` serves batches reader, reader + readers, ...: exactly the records of its part
            rows = [r for b in range(reader, len(stream), readers) for r in stream[(1, b)]]
            part = stream.part(1, reader)
            expected = [q for shard, a, z in part for q in ids[shard][a:z]]
            assert sorted(r["question_id"] for r in rows[: len(expected)]) == sorted(expected)
            assert all(r["real"] for r in rows[: len(expected)])
            if expected:  # it read only the chunks of its part (an empty part borrows the first record)
                assert sorted(set(opened)) == sorted({shard for shard, _, _ in part})
            own += expected
            padding += rows[len(expected) :]
    assert sorted(own) == everything  # the union over ranks and workers: every record exactly once
    assert all(r["real"] == train and r["question_id"] in everything and r["kg"] for r in padding)


def test_fewer_records_than_parts_borrows_a_record(shards):
    ranks = [stream_ids(RankStream(chunks(shards, ["b"]), 1, rank=r, world_size=2), 0) for r in (0, 1)]
    assert ranks == [[("b-q0", False)], [("b-q0", True)]]  # rank 0's part is empty: it borrows, not real
    assert len(RankStream(ChunkShards([]), 2)) == 0


def test_shuffle_changes_with_the_epoch_only(shards):
    stream = RankStream(chunks(shards), 8, shuffle=True, seed=1)
    epochs = [stream_ids(stream, e) for e in (0, 1, 0)]
    assert epochs[0] == epochs[2] != epochs[1]
    assert sorted(epochs[0]) == sorted(epochs[1])


def test_batch_sampler_hands_the_epoch_over():
    sampler = StreamBatchSampler(3, num_replicas=2, rank=1)
    sampler.set_epoch(5)
    assert list(sampler) == [(5, 0), (5, 1), (5, 2)] and len(sampler) == 3


# --- the DataModule on musique100 ---------------------------------------------------------------------


def make_dm(index_config, cache_dir, subgraph=None, **overrides) -> SubgraphDataModule:
    args = {
        "datasets": ["musique100"],
        "index": index_config(embed_model=None),  # no entity embeddings: the index builds in seconds
        "limit": LIMIT,
        "batch_size": 2,
        "seed": 1,
        "embed_model": DEFAULT_MODEL,
        "tokenizer": DEFAULT_MODEL,
        "subgraph": {"max_triplets": 50, **(subgraph or {})},
        "shard_size": 4,
        "num_workers": 0,
        "cache_dir": str(cache_dir),
    }
    return SubgraphDataModule(**(args | overrides))


@pytest.fixture(scope="module")
def dm(index_config, tmp_path_factory):
    dm = make_dm(index_config, tmp_path_factory.mktemp("subgraphs"))
    dm.prepare_data()
    dm.setup("fit")
    return dm


def split_questions(split: str) -> list[Question]:
    return list(load_dataset("musique100", split, limit=LIMIT).qa)


def train_ids(dm) -> list[str]:
    index = dm.index("musique100")
    return [q.id for q in split_questions("train") if index.entities_of_passages(list(q.supporting))]


def files_state(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_prepare_writes_shards_whose_records_match_question_record(dm):
    (meta,) = dm.splits["train_split"]
    folder = Path(meta["folder"])
    assert folder.parent.parent.parent == dm.cache_dir and folder.parts[-2:] == ("musique100", "train")
    assert folder.parent.parent.name.startswith("h2-t50-graph-text-eos-last-s0-")
    assert meta["count"] == len(train_ids(dm)) and meta["dropped_without_targets"] == LIMIT - meta["count"]
    assert [s["count"] for s in meta["shards"]] == [min(4, meta["count"] - i) for i in range(0, meta["count"], 4)]
    assert sorted(p.name for p in folder.iterdir()) == sorted([INDEX, META] + [s["file"] for s in meta["shards"]])
    assert meta["settings"] == SubgraphSettings(max_triplets=50).as_dict() and meta["tokenizer"] == DEFAULT_MODEL

    stored = next(ChunkShards([str(folder)]).rows(0, 0, 1))
    question = next(q for q in split_questions("train") if q.id == stored["question_id"])
    full = load_dataset("musique100")
    emb = cached_question_embeddings(list(full.qa), DEFAULT_MODEL, default_inputs_cache_dir())[question.id]
    settings = SubgraphSettings(max_triplets=50)
    expected = question_record(
        dm.index("musique100"), question, "musique100", load_tokenizer(DEFAULT_MODEL), settings, emb
    )
    assert stored["question_id"] == train_ids(dm)[0]
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(np.asarray(stored[name], value.dtype), value, err_msg=name)
        else:
            assert stored[name] == value, name


def test_a_second_prepare_rewrites_nothing(dm):
    before = files_state(dm.cache_dir)
    dm.prepare_data()
    assert files_state(dm.cache_dir) == before


def test_a_folder_without_meta_is_rebuilt_never_read(dm, index_config):
    (meta,) = dm.splits["val_split"]
    folder = Path(meta["folder"])
    shard = folder / meta["shards"][0]["file"]
    content, inode = shard.read_bytes(), shard.stat().st_ino
    (folder / META).unlink()
    fresh = make_dm(index_config, dm.cache_dir)
    with pytest.raises(FileNotFoundError, match="call prepare_data"):
        fresh.setup("fit")
    fresh.prepare_data()
    assert read_meta(folder) == {k: v for k, v in meta.items() if k != "folder"}
    assert shard.stat().st_ino != inode and shard.read_bytes() == content


@pytest.mark.parametrize("chunking", [{"shard_size": 3}, {"write_workers": 2}])
def test_how_the_chunks_are_cut_is_part_of_the_key(dm, index_config, chunking):
    other = make_dm(index_config, dm.cache_dir, **chunking)
    other.prepare_data()
    other.setup("fit")
    (mine,), (theirs,) = dm.splits["train_split"], other.splits["train_split"]
    assert Path(mine["folder"]).parents[1] != Path(theirs["folder"]).parents[1]  # two keys: two folders
    sizes = chunking.get("shard_size", 4), 4
    assert (max(s["count"] for s in theirs["shards"]), max(s["count"] for s in mine["shards"])) == sizes


def test_each_epoch_streams_every_training_question_once_in_a_new_order(dm):
    loader = dm.train_dataloader()
    expected = train_ids(dm)
    orders = []
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        batches = list(loader)
        assert len(batches) == len(loader) == math.ceil(len(expected) / 2)
        ids = [q for b in batches for q in b["question_ids"]]
        assert sorted(ids) == sorted(expected)
        assert all(b["real"].all() and b["kg"] == ["musique100"] * len(b["real"]) for b in batches)
        orders.append(ids)
    assert orders[0] != orders[1]
    batch = batches[0]
    assert batch["question_emb"].shape == (2, 384)
    assert torch.allclose(batch["question_emb"].norm(dim=1), torch.ones(2), atol=1e-4)
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["relative_position"].shape[1:] == batch["kind"].shape[1:]


def test_validation_streams_in_file_order(dm):
    ids = [q for b in dm.val_dataloader() for q in b["question_ids"]]
    assert ids == [q.id for q in split_questions("validation")]  # all kept: evaluation drops nothing


def test_two_ranks_cover_every_question_with_equal_batch_counts(dm):
    try:
        streams = {}
        for rank in (0, 1):
            dm.trainer = SimpleNamespace(world_size=2, global_rank=rank, current_epoch=0)
            dm.setup("fit")
            assert dm.batch_size_per_device == 1
            streams[rank] = {"train": list(dm.train_dataloader()), "val": list(dm.val_dataloader())}
    finally:
        dm.trainer = None
        dm.setup("fit")
    for split, expected in (("train", train_ids(dm)), ("val", [q.id for q in split_questions("validation")])):
        counts = [len(streams[r][split]) for r in (0, 1)]
        assert counts[0] == counts[1] == math.ceil(len(expected) / 2)
        batches = streams[0][split] + streams[1][split]
        rows = [(q, bool(real)) for b in batches for q, real in zip(b["question_ids"], b["real"], strict=True)]
        real = [q for q, is_real in rows if is_real]
        assert len(rows) == 2 * counts[0]
        if split == "val":  # 9 questions: rank 1 repeats one, marked not real
            assert sorted(real) == sorted(expected) and len(rows) - len(real) == 2 * counts[0] - len(expected) == 1
        else:  # repeats count as samples in training
            assert set(real) == set(expected) and len(real) == len(rows)


def test_workers_serve_every_question_once_and_follow_the_epoch(dm, index_config):
    with_workers = make_dm(index_config, dm.cache_dir, num_workers=2)
    with_workers.setup("fit")
    loader = with_workers.train_dataloader()
    assert loader.num_workers == 2 and loader.persistent_workers and loader.dataset.readers == 2
    orders = []
    for epoch in (0, 1, 0):
        loader.sampler.set_epoch(epoch)
        orders.append([(q, bool(real)) for b in loader for q, real in zip(b["question_ids"], b["real"], strict=True)])
    assert orders[0] == orders[2] != orders[1]
    for order in orders:
        # 2 readers: a reader short of a whole batch tops up with one repeated record (real in training)
        assert set(q for q, _ in order) == set(train_ids(dm)) and len(order) - len(train_ids(dm)) <= 2


def test_workers_default_to_the_cores(dm, monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(16)))
    assert dm.hparams.num_workers == 0 and dm.num_workers == 0  # the fixture asks for 0
    assert make_dm_like(dm, num_workers=None).num_workers == 4
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1})
    assert make_dm_like(dm, num_workers=None).num_workers == 1
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0})
    assert make_dm_like(dm, num_workers=None).num_workers == 1  # never 0 by default


def make_dm_like(dm, **overrides) -> SubgraphDataModule:
    return SubgraphDataModule(**(dict(dm.hparams) | overrides))


def test_config_builds_the_datamodule_with_the_models_subgraph_settings(index_config, tmp_path):
    node = OmegaConf.load(ROOT / "configs" / "datamodule" / "subgraph.yaml")
    del node["defaults"]  # Hydra's (the node's schema), not an argument
    cfg = OmegaConf.create(
        {
            "seed": 3,
            "data": {"name": "musique100", "root": None, "limit": 5},
            "index": index_config(embed_model=DEFAULT_MODEL),
            "model": {
                "glm": {"tokenizer": DEFAULT_MODEL},
                "subgraph": {
                    "max_hops": 2,
                    "max_triplets": 600,
                    "layout": "linear",
                    "use_text": False,
                    "position_mode": "path",
                    "seed": 4,
                    "position_conflict": "nearest",
                    "question_eos": False,
                },
            },
            "datamodule": node,
        }
    )
    dm = instantiate_datamodule(cfg)  # as the training job builds it: with model.subgraph
    assert isinstance(dm, SubgraphDataModule)
    hp = dm.hparams
    assert (
        hp.embed_model,
        hp.tokenizer,
        hp.subgraph["layout"],
        hp.subgraph["use_text"],
        hp.subgraph["position_mode"],
    ) == (
        DEFAULT_MODEL,
        DEFAULT_MODEL,
        "linear",
        False,
        "path",
    )
    assert (hp.batch_size, hp.subgraph["max_hops"], hp.subgraph["max_triplets"], hp.seed, hp.limit, hp.datasets) == (
        2,
        2,
        600,
        3,
        5,
        ["musique100"],
    )
    assert dm.settings == SubgraphSettings(2, 600, "linear", False, "path", 4, False, "nearest")
    assert dm.cache_dir.name == "glm_chunks"
    assert hp.num_workers is None and dm.num_workers >= 1 and not hp.precompute
    assert hp.subgraph == dm.settings.as_dict()  # every field, plain


def test_constructor_rejects_bad_values(index_config):
    with pytest.raises(ValueError, match="layout"):
        SubgraphDataModule(["musique100"], index_config(), subgraph={"layout": "tree"})
    with pytest.raises(TypeError, match=r"subgraph has unknown key\(s\) \['max_triplet'\]"):
        SubgraphDataModule(["musique100"], index_config(), subgraph={"max_triplet": 5})
    with pytest.raises(TypeError, match=r"unknown key\(s\) \['precompute'\]"):  # the DataModule's own argument
        SubgraphDataModule(["musique100"], index_config(), subgraph={"precompute": True})
    with pytest.raises(ValueError, match="datamodule.precompute"):
        SubgraphDataModule(["musique100"], index_config(), precompute="yes")
    with pytest.raises(ValueError, match="distinct"):
        SubgraphDataModule(["toy", "toy"], index_config())


def test_precomputed_positions_stream_the_same_batches(dm, index_config):
    stored = make_dm(index_config, dm.cache_dir, subgraph={"position_mode": "path"}, precompute=True)
    stored.prepare_data()
    stored.setup("fit")
    computed = make_dm(index_config, dm.cache_dir, subgraph={"position_mode": "path"})
    computed.setup("fit")
    (meta,) = stored.splits["val_split"]
    assert "-pos-path-" in meta["folder"] and "relative_position" in next(ChunkShards([meta["folder"]]).rows(0, 0, 1))
    for a, b in zip(stored.val_dataloader(), computed.val_dataloader(), strict=True):
        assert a["question_ids"] == b["question_ids"]
        for name in ("relative_position", "kind", "input_ids", "target"):
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
