"""``train_fraction`` (GLM-RAG App. C, Fig. 7): a seeded, nested share of the training questions in both DataModules."""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from glmrag.data.registry import load_dataset
from glmrag.datamodules.gnn_datamodule import KGQADataModule
from glmrag.datamodules.subgraph_data import SubgraphDataModule
from glmrag.datamodules.train_fraction import check_train_fraction, fraction_of
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.jobs.common import instantiate_datamodule

ROOT = Path(__file__).resolve().parents[2]
FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # configs/experiment/study_data_scaling.yaml
pytestmark = pytest.mark.usefixtures("glmrag_cache")


@pytest.fixture(scope="module")
def train_questions():
    return list(load_dataset("musique100", split="train").qa)  # 60 questions


def ids(questions) -> list[str]:
    return [q.id for q in questions]


def documented_draw(questions, fraction: float, seed: int) -> list[str]:
    """The ids ``fraction_of`` promises, written out from its docstring: the ``ceil(fraction * n)`` questions
    (at least one) with the smallest ``sha256(f"{seed}/{id}")``, in their original order."""
    size = max(1, math.ceil(round(fraction * len(questions), 9)))
    drawn = set(sorted(ids(questions), key=lambda i: hashlib.sha256(f"{seed}/{i}".encode()).digest())[:size])
    return [i for i in ids(questions) if i in drawn]


# --- the draw ---------------------------------------------------------------------------------------


def test_sizes_round_up_and_keep_the_split_order(train_questions):
    assert len(train_questions) == 60
    for fraction, size in zip(FRACTIONS, (15, 30, 45, 60), strict=True):
        subset = fraction_of(train_questions, fraction, seed=0)
        assert len(subset) == size
        positions = [ids(train_questions).index(q) for q in ids(subset)]
        assert positions == sorted(positions)  # original order, no reshuffle
    assert len(fraction_of(train_questions, 0.3, seed=0)) == 18
    assert len(fraction_of(train_questions[:10], 0.3, seed=0)) == 3  # 0.3 * 10 is 3.0000000000000004
    assert len(fraction_of(train_questions[:10], 0.31, seed=0)) == 4  # rounds up
    assert len(fraction_of(train_questions, 1e-6, seed=0)) == 1  # never empty
    assert fraction_of([], 0.5, seed=0) == []
    assert fraction_of(train_questions, 1.0, seed=5) == train_questions


@pytest.mark.parametrize(("fraction", "seed"), [(0.25, 0), (0.5, 3), (0.3, 7), (1e-6, 1)])
def test_the_draw_is_the_documented_hash_ranking(train_questions, fraction, seed):
    assert ids(fraction_of(train_questions, fraction, seed)) == documented_draw(train_questions, fraction, seed)


@pytest.mark.parametrize("seed", [0, 7])
def test_smaller_fractions_are_nested_in_larger_ones(train_questions, seed):
    subsets = [set(ids(fraction_of(train_questions, f, seed))) for f in (0.1, *FRACTIONS)]
    for small, large in zip(subsets, subsets[1:], strict=False):
        assert small < large


def test_the_draw_follows_the_seed_and_the_ids_only(train_questions):
    half = ids(fraction_of(train_questions, 0.5, seed=3))
    assert ids(fraction_of(train_questions, 0.5, seed=3)) == half  # reproducible
    assert set(ids(fraction_of(train_questions, 0.5, seed=4))) != set(half)  # another seed, another draw
    shuffled = train_questions.copy()
    random.Random(1).shuffle(shuffled)
    assert set(ids(fraction_of(shuffled, 0.5, seed=3))) == set(half)  # membership does not depend on positions
    # not the first half: the draw spreads over the split
    assert set(half) != set(ids(train_questions[:30]))
    firsts = sum(q in half for q in ids(train_questions[:30]))
    assert 5 <= firsts <= 25


@pytest.mark.parametrize("bad", [0, 0.0, -0.25, 1.5, math.nan, True, "0.5", None])
def test_bad_fractions_are_rejected_with_the_fix(bad, index_config):
    with pytest.raises(ValueError, match=r"datamodule\.train_fraction .* must be a number in \(0, 1\]"):
        check_train_fraction(bad)
    with pytest.raises(ValueError, match="train_fraction"):
        KGQADataModule(["musique100"], index_config(), train_fraction=bad)
    with pytest.raises(ValueError, match="train_fraction"):
        SubgraphDataModule(["musique100"], index_config(), train_fraction=bad)
    assert check_train_fraction(1) == 1.0 and isinstance(check_train_fraction(1), float)


# --- both DataModules -------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [KGQADataModule, SubgraphDataModule])
def test_only_the_training_split_is_subsampled(cls, index_config, train_questions):
    dm = cls(["musique100"], index_config(), train_fraction=0.25, seed=2)
    assert dm.hparams.train_fraction == 0.25
    assert ids(dm.split_questions("musique100", "train_split")) == documented_draw(train_questions, 0.25, 2)
    for split_name, split in (("val_split", "validation"), ("test_split", "test")):
        assert ids(dm.split_questions("musique100", split_name)) == ids(load_dataset("musique100", split=split).qa)
    # limit first, then the fraction of what is left
    limited = cls(["musique100"], index_config(), limit=8, train_fraction=0.5, seed=2)
    assert ids(limited.split_questions("musique100", "train_split")) == documented_draw(train_questions[:8], 0.5, 2)


def test_kgqa_training_records_are_the_drawn_questions(index_config, train_questions):
    dm = KGQADataModule(["musique100"], index_config(embed_model=None), train_fraction=0.5, seed=1)
    from glmrag.index.cache import get_index

    dm.indexes["musique100"] = get_index(load_dataset("musique100"), OmegaConf.create(index_config(embed_model=None)))
    records = dm._qa_records("musique100", dm.index("musique100"), "train_split", train=True)
    drawn = [q for q in train_questions if q.id in documented_draw(train_questions, 0.5, seed=1)]
    with_targets = [q.id for q in drawn if dm.index("musique100").entities_of_passages(list(q.supporting))]
    assert [r.question_id for r in records] == with_targets and 0 < len(records) <= 30


def test_subgraph_training_shards_hold_the_drawn_questions(index_config, tmp_path):
    kwargs = {
        "index": index_config(embed_model=None),
        "limit": 8,
        "subgraph": {"max_triplets": 20},
        "cache_dir": str(tmp_path),
    }
    kwargs |= {"tokenizer": DEFAULT_MODEL, "embed_model": DEFAULT_MODEL, "seed": 5}
    full = SubgraphDataModule(["musique100"], **kwargs)
    half = SubgraphDataModule(["musique100"], train_fraction=0.5, **kwargs)
    for dm in (full, half):
        dm.prepare_data()
        dm.setup("fit")
    index = half.index("musique100")
    first_eight = list(load_dataset("musique100", "train", limit=8).qa)
    drawn = [q for q in first_eight if q.id in documented_draw(first_eight, 0.5, seed=5)]
    expected = {q.id for q in drawn if index.entities_of_passages(list(q.supporting))}  # training drops the rest
    streamed = [q for b in half.train_dataloader() for q in b["question_ids"]]
    assert sorted(streamed) == sorted(expected) and len(drawn) == 4 and expected
    assert half.splits["train_split"][0]["folder"] != full.splits["train_split"][0]["folder"]  # own shards
    assert half.splits["val_split"][0]["folder"] == full.splits["val_split"][0]["folder"]  # shared validation
    assert half.splits["train_split"][0]["count"] < full.splits["train_split"][0]["count"]


# --- the configs ------------------------------------------------------------------------------------


def _compose(overrides):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=["output_dir=x", *overrides])


@pytest.mark.parametrize("experiment", ["demo", "glm_demo"])
def test_the_config_key_reaches_either_datamodule(experiment):
    assert _compose([f"experiment={experiment}"]).datamodule.train_fraction == 1.0
    cfg = _compose([f"experiment={experiment}", "datamodule.train_fraction=0.5"])
    dm = instantiate_datamodule(cfg)
    assert dm.hparams.train_fraction == 0.5
    with pytest.raises(Exception, match="train_fraction"):
        instantiate_datamodule(_compose([f"experiment={experiment}", "datamodule.train_fraction=0"]))


def test_the_data_scaling_study_sweeps_the_fraction():
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", ["experiment=study_data_scaling", "output_dir=x"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert [float(v) for v in params["datamodule.train_fraction"].split(",")] == list(FRACTIONS)
    run = _compose(["experiment=study_data_scaling", "+system=glm_rag", "datamodule.train_fraction=0.25"])
    assert run.run_name == "glm_rag-f0.25-musique100" and run.datamodule.limit is None and run.data.limit is None
