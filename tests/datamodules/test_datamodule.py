"""KGQADataModule and its KGBatchSampler: one KG per batch, every question once per epoch, DDP slices."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from glmrag.data.registry import load_dataset
from glmrag.datamodules.gnn_datamodule import KGQADataModule
from glmrag.datamodules.kg_sampler import KGBatchSampler

GROUPS = [list(range(7)), list(range(7, 10))]  # two KGs: 7 and 3 items
MUSIQUE = "musique_tiny"  # a few dozen musique100 passages (tests/conftest.py), registered by its fixture
EXTRACTORS = {MUSIQUE: "openie", "toy": "spacy"}

pytestmark = pytest.mark.usefixtures("glmrag_cache", "tiny_musique")  # GLMRAG_CACHE_DIR, musique_tiny loadable


def real_items(batch):
    return [i for i, pad in batch if not pad]


# --- the sampler ---------------------------------------------------------------------------------


def test_sampler_batches_come_from_one_kg_and_cover_every_item_once():
    sampler = KGBatchSampler(GROUPS, batch_size=2, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 4 + 2
    for batch in batches:
        assert len({i < 7 for i, _ in batch}) == 1  # one KG
        assert not any(pad for _, pad in batch)  # one device: nothing to pad
    assert sorted(i for b in batches for i in real_items(b)) == list(range(10))


def test_sampler_order_is_seeded_per_epoch():
    sampler = KGBatchSampler(GROUPS, batch_size=2, seed=0)
    first = list(sampler)
    assert list(sampler) == first  # same epoch: same order
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert list(KGBatchSampler(GROUPS, batch_size=2, seed=0, shuffle=False)) == [
        [(0, False), (1, False)],
        [(2, False), (3, False)],
        [(4, False), (5, False)],
        [(6, False)],
        [(7, False), (8, False)],
        [(9, False)],
    ]


@pytest.mark.parametrize("shuffle", [True, False])
def test_two_ranks_split_every_global_batch_of_one_device(shuffle):
    """Batch G on one device and G/2 on each of two: the same questions in every optimizer step."""
    one = KGBatchSampler(GROUPS, batch_size=4, shuffle=shuffle, seed=3)
    ranks = [KGBatchSampler(GROUPS, batch_size=2, num_replicas=2, rank=r, shuffle=shuffle, seed=3) for r in (0, 1)]
    for sampler in (one, *ranks):
        sampler.set_epoch(5)
    assert len(one) == len(ranks[0]) == len(ranks[1]) == 3  # 7 -> 4 + 3, 3 -> 3
    for whole, part0, part1 in zip(one, *ranks, strict=True):
        assert len(part0) == len(part1)  # DDP needs equal local batches
        assert real_items(part0) + real_items(part1) == [i for i, _ in whole]
        assert set(real_items(part0)).isdisjoint(real_items(part1))
        padding = [i for i, pad in part0 + part1 if pad]
        assert len(padding) == len(part0 + part1) - len(whole) and set(padding) <= {i for i, _ in whole}


def test_sampler_rejects_an_empty_batch_size():
    with pytest.raises(ValueError, match="batch_size"):
        KGBatchSampler(GROUPS, batch_size=0)


# --- the DataModule on two real KGs -----------------------------------------------------------------


@pytest.fixture(scope="module")
def two_kgs(index_config):
    dm = KGQADataModule(["toy", MUSIQUE], index=index_config(extractor=EXTRACTORS), limit=9, batch_size=4, seed=1)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_every_training_question_once_per_epoch_in_batches_of_one_kg(two_kgs):
    dm = two_kgs
    questions = {name: {q.id: q for q in load_dataset(name, "train", limit=9).qa} for name in ("toy", MUSIQUE)}
    loader = dm.train_dataloader()
    epochs = []
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        seen = []
        for batch in loader:
            kg, qids = batch["kg"], batch["question_ids"]
            index = dm.index(kg)
            assert set(qids) <= questions[kg].keys()  # one KG per batch
            assert batch["seed_weight"].shape == batch["target"].shape == (len(qids), index.num_entities)
            assert batch["question_emb"].shape == (len(qids), 384)
            assert torch.allclose(batch["question_emb"].norm(dim=1), torch.ones(len(qids)), atol=1e-4)
            assert batch["real"].all()
            for row, qid in enumerate(qids):
                question = questions[kg][qid]
                target = torch.nonzero(batch["target"][row]).flatten().tolist()
                assert target == index.entities_of_passages(list(question.supporting)) and target
                assert torch.nonzero(batch["seed_weight"][row]).flatten().tolist() == sorted(index.seeds(qid))
                assert batch["gold"][row] == list(question.supporting)
            seen += [(kg, q) for q in qids]
        assert sorted(seen) == sorted((kg, q) for kg in questions for q in questions[kg])
        epochs.append(seen)
    assert epochs[0] != epochs[1]  # reshuffled
    assert dm.graph("toy").num_nodes == dm.index("toy").num_entities


def test_validation_serves_each_question_once_in_order(two_kgs):
    batches = list(two_kgs.val_dataloader())
    qids = [q for b in batches for q in b["question_ids"]]
    assert qids == [q.id for q in load_dataset(MUSIQUE, "validation", limit=9).qa] and qids  # toy has none
    assert all(b["kg"] == MUSIQUE for b in batches)


def test_two_simulated_ranks_share_every_global_batch(two_kgs):
    """The DataModule's own loaders on ranks 0 and 1 of 2 devices vs one device, same global batch 4."""
    dm = two_kgs

    def batches(world, rank):
        dm.trainer = SimpleNamespace(world_size=world, global_rank=rank)
        dm.setup("fit")  # reads the device count: batch 4 -> 2 per device
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(2)
        return list(loader)

    try:
        one, rank0, rank1 = batches(1, 0), batches(2, 0), batches(2, 1)
    finally:
        dm.trainer = None
        dm.setup("fit")
    assert len(one) == len(rank0) == len(rank1)
    for whole, part0, part1 in zip(one, rank0, rank1, strict=True):
        assert whole["kg"] == part0["kg"] == part1["kg"]
        assert len(part0["question_ids"]) == len(part1["question_ids"]) <= 2
        # In training a repeat is a sample; the repeats of a short batch come from that batch.
        merged = list(dict.fromkeys(part0["question_ids"] + part1["question_ids"]))
        assert merged == whole["question_ids"]


def test_batch_size_must_split_over_the_devices(two_kgs):
    two_kgs.trainer = SimpleNamespace(world_size=3, global_rank=0)
    try:
        with pytest.raises(ValueError, match="not divisible by the 3 devices"):
            two_kgs.setup("fit")
    finally:
        two_kgs.trainer = None


def test_kgc_task_serves_triples_of_one_kg(index_config):
    dm = KGQADataModule(["toy"], index=index_config(extractor=EXTRACTORS), task="kgc", batch_size=8)
    dm.setup("fit")
    index = dm.index("toy")
    rows = [tuple(t) for b in dm.train_dataloader() for t in b["triples"].tolist()]
    assert sorted(rows) == sorted(map(tuple, index.triples.tolist()))
    assert np.isin(np.asarray(rows)[:, 1], np.arange(index.num_relations)).all()
