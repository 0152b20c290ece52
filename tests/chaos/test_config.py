"""Bad command-line settings stop the job up front with the key, the value and the allowed range."""

from __future__ import annotations

import json

import pytest
import torch

from glmrag.data.registry import load_dataset
from glmrag.index.cache import get_index
from glmrag.index.ranking_metrics import reciprocal_rank
from glmrag.jobs.config_check import ConfigError, validate_eval_config, validate_train_config
from glmrag.jobs.evaluate import run_eval
from glmrag.jobs.train import run_train
from glmrag.retrievers.dense import DenseRetriever
from tests.chaos.conftest import compose_config

pytestmark = pytest.mark.chaos

EVAL_CASES = [
    ("ks=[1.5]", r"ks=\[1.5\]: 1.5 is not an integer >= 1"),
    ("ks=[a]", r"'a' is not an integer >= 1"),
    ("ks=[]", r"ks=\[\]: must be a non-empty list"),
    ("ks=[0]", r"0 is not an integer >= 1"),
    ("top_k=0", r"top_k=0: must be an integer >= 1 or null"),
    ("top_k=-5", r"top_k=-5: must be an integer >= 1 or null"),
    ("top_k=1", r"top_k=1: must be null \(the full ranking\) or >= max\(ks\)=10"),
    ("n_boot=0", r"n_boot=0: must be an integer >= 1"),
    ("data.limit=0", r"data.limit=0: must be an integer >= 1 or null"),
    ("retriever=[checkpoint]", r"ckpt_path is not set"),
    ("retriever=[checkpoint] ckpt_path=/nope/x.ckpt", r"ckpt_path=/nope/x.ckpt: no such checkpoint file"),
    ("retriever=[checkpoint] ckpt_path=https://127.0.0.1:1/x.ckpt", r"remote checkpoints are refused"),
]


@pytest.mark.parametrize(("overrides", "message"), EVAL_CASES, ids=[c[0] for c in EVAL_CASES])
def test_eval_config_errors_name_key_value_and_range(overrides, message):
    cfg = compose_config("eval", ["output_dir=unused", *overrides.split()])
    with pytest.raises(ConfigError, match=message):
        validate_eval_config(cfg)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [("ks=[2.5]", "2.5 is not an integer"), ("n_boot=-1", "n_boot=-1"), ("ckpt_path=/nope.ckpt", "/nope.ckpt")],
)
def test_train_config_errors(overrides, message):
    cfg = compose_config("train", ["experiment=demo", "output_dir=unused", overrides])
    with pytest.raises(ConfigError, match=message):
        validate_train_config(cfg)


def test_run_eval_validates_before_loading_anything(cache, tmp_path):
    cfg = compose_config("eval", ["data=toy", f"output_dir={tmp_path / 'o'}", "top_k=-5", "ks=[1]"])
    with pytest.raises(ConfigError, match="top_k=-5"):
        run_eval(cfg)
    assert not cache.exists()  # refused before the index was built


def test_mrr_is_computed_on_the_full_ranking(cache, tmp_path):
    """ks=[1]: the ranking used for MRR is not cut at max(ks); its value is 1/rank in the whole ranking."""
    out = tmp_path / "o"
    result = run_eval(compose_config("eval", ["data=toy", f"output_dir={out}", "ks=[1]", "n_boot=10"]))
    rows = [json.loads(line) for line in (out / "per_question.jsonl").read_text().splitlines()]
    data = load_dataset("toy")
    gold = {q.id: q.supporting for q in data.qa}
    index = get_index(data, compose_config("eval", ["data=toy", "output_dir=unused"]).index)
    dense = DenseRetriever("offline:all-MiniLM-L6-v2")
    full = dense.retrieve(list(data.qa), index, data.corpus, top_k=len(data.corpus))
    expect = [reciprocal_rank(r.passage_ids, gold[r.question_id]) for r in full]
    assert min(expect) < 1  # a gold passage below rank 1: a ranking cut at max(ks)=1 would give 0
    assert [r["mrr"] for r in rows if r["system"] == "dense"] == pytest.approx(expect)
    assert result.overall["dense"]["mrr"].mean == pytest.approx(sum(expect) / len(expect))


MEANINGLESS = [  # issue 22 probes 70-78: typed right, meaning nothing
    (
        "eval",
        "retriever=[checkpoint] ckpt_path=CKPT retriever.checkpoint.top_entities=0",
        r"top_entities=0: must be an",
    ),
    ("eval", "retriever=[checkpoint] ckpt_path=CKPT retriever.checkpoint.top_entities=-3", r"top_entities=-3"),
    ("train", "trainer.max_epochs=0", r"trainer.max_epochs=0: must be an integer >= 1"),
    ("train", "datamodule.limit=0", r"datamodule.limit=0: must be an integer >= 1 or null"),
    ("train", "model.subgraph.max_triplets=0", r"model.subgraph.max_triplets=0: must be an integer >= 1 or null"),
    ("train", "model.subgraph.max_hops=0", r"model.subgraph.max_hops=0: must be an integer >= 1"),
    ("train", "model.loss.bce_weight=-5", r"model.loss.bce_weight=-5.0: must be a finite number >= 0"),
    ("train", "model.loss.bce_weight=0 model.loss.listce_weight=0", r"are all 0: nothing would be trained"),
    ("train", "experiment=glm_demo model.subgraph.max_triplets=0", r"model.subgraph.max_triplets=0"),
]

MEANINGLESS += [  # issue 37 probes 13-15: values that are not numbers, or not sane ones
    ("train", "model.loss.bce_weight=nan", r"model.loss.bce_weight=nan: must be a finite number"),
    ("train", "model.optimizer.lr=inf", r"model.optimizer.lr=inf: must be a finite number"),
    ("train", "model.optimizer.lr=-1", r"model.optimizer: Invalid learning rate: -1"),
    ("train", "model.optimizer.lr=abc", r"model.optimizer: .*'str'"),
    ("train", "model.optimizer.weight_decay=-0.1", r"model.optimizer: Invalid weight_decay value: -0.1"),
    ("train", "+model.optimizer.betas=[0.9,1.5]", r"model.optimizer: Invalid beta parameter at index 1: 1.5"),
    ("train", "datamodule.batch_size=0", r"datamodule.batch_size=0: must be an integer >= 1"),
    ("train", "datamodule.num_workers=-1", r"datamodule.num_workers=-1: must be an integer >= 0 \("),
    ("train", "datamodule.chunk_size=0", r"datamodule.chunk_size=0: must be an integer >= 1"),
    ("train", "experiment=glm_demo datamodule.shard_size=0", r"datamodule.shard_size=0: must be an integer >= 1"),
    (
        "train",
        "experiment=glm_demo datamodule.num_workers=-2",
        r"num_workers=-2: must be an integer >= 0 or",
    ),
    ("train", "model.gnn.num_layers=1000000", r"model.gnn.num_layers=1000000: above the sanity bound 64"),
    ("train", "experiment=glm_demo model.lr.head=nan", r"model.lr.head=nan: must be a finite number"),
    ("train", "experiment=glm_demo model.lr.backbone=-1", r"lr.backbone must be a finite number >= 0, got -1.0"),
    ("eval", "+retriever.dense.anything=-inf", r"retriever.dense.anything=-inf: must be a finite number"),
]

MEANINGLESS += [  # issue 50: a value of the wrong type was a raw comparison error without its key
    (
        "train",
        "experiment=demo_2wiki model.prior.damping=abc",
        r"model.prior.damping='abc': must be float",
    ),
]


@pytest.mark.parametrize(("job", "overrides", "message"), MEANINGLESS, ids=[c[1] for c in MEANINGLESS])
def test_meaningless_values_are_config_errors(job, overrides, message, tmp_path):
    ckpt = tmp_path / "x.ckpt"
    torch.save({"state_dict": {}}, ckpt)
    extra = overrides.replace("CKPT", str(ckpt)).split()
    if job == "train" and not extra[0].startswith("experiment="):
        extra = ["experiment=demo", *extra]
    cfg = compose_config(job, ["output_dir=unused", *extra])
    with pytest.raises(ConfigError, match=message):
        (validate_train_config if job == "train" else validate_eval_config)(cfg)


def test_a_learning_rate_that_is_no_number_stops_training_before_any_work(cache, tmp_path):
    cfg = compose_config("train", ["experiment=demo", f"output_dir={tmp_path / 'o'}", "model.optimizer.lr=-1"])
    with pytest.raises(ConfigError, match=r"model.optimizer: Invalid learning rate: -1"):
        run_train(cfg)
    assert not cache.exists()  # refused before the index was built (torch's "Invalid learning rate" came after)


def test_a_wrong_embed_dim_stops_the_job_before_the_index_build(tmp_path, monkeypatch):
    monkeypatch.setattr("glmrag.jobs.train.register_data", lambda *a: pytest.fail("work started"))
    cfg = compose_config("train", ["experiment=demo", f"output_dir={tmp_path}", "index.embed_dim=100"])
    with pytest.raises(ConfigError, match=r"index.embed_dim=100: index.embed_model=offline:all-MiniLM-L6-v2 gives 384"):
        run_train(cfg)


def test_no_significance_is_claimed_on_one_question(cache, tmp_path):
    """data=toy has one question: dense and PPR were marked ** against each other (issue 22, probe 79)."""
    out = tmp_path / "o"
    result = run_eval(compose_config("eval", ["data=toy", f"output_dir={out}", "retriever=[dense,ppr]", "n_boot=50"]))
    assert result.significance == [] and result.settings.untested_metrics == {"recall@2": 1, "recall@5": 1}
    table = (out / "results.md").read_text()
    assert "\\*" not in table and "No significance markers for Recall@2 on 1, Recall@5 on 1" in table
    assert "needs at least 10" in table
    assert json.loads((out / "metrics.json").read_text())["significance"] == []
