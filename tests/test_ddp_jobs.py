"""``train.py`` under DDP as on GPUs: Lightning's subprocess launcher (``strategy: ddp``), 2 CPU ranks over gloo.

Each job runs as a user runs it (``python train.py ... trainer=ddp_cpu`` from an empty folder): fit, test and
the shared evaluator, exactly one evaluation and one results-store entry per job, the validation metrics
of the trained checkpoint equal to a one-process validation of it, ``train/loss`` the mean over both ranks
(the global batch's loss, as one process logs it), and a multirun that gives each job its own ranks.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import hydra
import lightning as L
import pytest
from job_runs import run_job_once_more_if_hung

from glmrag.jobs.common import instantiate_datamodule

ROOT = Path(__file__).resolve().parents[1]
RUN = [
    "data.limit=8",  # 8 questions per split: 2 global batches of 4 (2 per rank)
    "trainer.max_epochs=1",
    "trainer.log_every_n_steps=1",
    "retriever@baselines=[ppr]",
    "logger=[csv]",
    "n_boot=50",
    "index.embed_model=offline:all-MiniLM-L6-v2",  # the paper configs embed with the hub's mpnet
    "index.embed_dim=384",
]
GNN = ["model.gnn.hidden_channels=8", "model.gnn.num_layers=1"]
GLM = [
    "model.glm.encoder_config={d_model: 16, d_ff: 32, num_layers: 1, num_heads: 2, d_kv: 8}",
    "model.glm.tokenizer=offline:all-MiniLM-L6-v2",
    "model.subgraph.max_triplets=40",
]
SYSTEMS = {
    "gfm_rag_plus": ["experiment=demo", *GNN],
    "gfm_rag": ["experiment=gfm_rag", *GNN, "pretrain.max_epochs=1", "+trainer.limit_train_batches=2"],
    "glm": ["experiment=glm_demo", *GLM],
}
VAL_METRICS = ("val/loss", "val/recall@2", "val/recall@5", "val/mrr")

pytestmark = pytest.mark.integration


def train(tmp_path: Path, glmrag_cache: Path, overrides: list[str], multirun: bool = False) -> None:
    """``python train.py [-m] <overrides>`` in ``tmp_path``; fails the test with the job's log on a non-zero exit."""
    if not (tmp_path / "train.py").exists():
        (tmp_path / "train.py").symlink_to(ROOT / "train.py")
    command = [sys.executable, "train.py", *(["-m"] if multirun else []), *overrides]
    env = os.environ | {"GLMRAG_CACHE_DIR": str(glmrag_cache)}

    def clear() -> None:  # what a hung run left: it may have filed its results already
        for left in tmp_path.iterdir():
            if left.is_dir():
                shutil.rmtree(left)
            elif left.name != "train.py":
                left.unlink()

    # a job takes 0.5-2 min here; a hang shows every process's stacks (job_runs)
    done = run_job_once_more_if_hung(command, tmp_path, env, timeout=600, before_retry=clear)
    assert done.returncode == 0, f"exit code {done.returncode}\n{done.stderr[-6000:]}"


def stored(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "results" / "adhoc").glob("*/metrics.json"))]


def logged(output_dir: Path, key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` in the CSV logger's file of a run."""
    (path,) = Path(output_dir, "csv").glob("version_*/metrics.csv")
    rows = list(csv.DictReader(path.open()))
    return [(int(r["step"]), float(r[key])) for r in rows if r.get(key)]


def one_process_validation(train_config, overrides: list[str], ckpt: str) -> dict[str, float]:
    """The checkpoint validated in this process on one CPU device, with the job's own DataModule config."""
    cfg = train_config([*overrides, "output_dir=unused"])
    datamodule = instantiate_datamodule(cfg)
    model = hydra.utils.get_class(cfg.model._target_).load_from_checkpoint(ckpt, weights_only=True, kgs=datamodule)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    return trainer.validate(model, datamodule=datamodule, verbose=False)[0]


@pytest.mark.parametrize("system", ["gfm_rag", "glm"])  # GFM-RAG+'s DDP job is the multirun test's
def test_ddp_job_fits_tests_and_evaluates_once(system, glmrag_cache, tmp_path, train_config):
    overrides = [*SYSTEMS[system], *RUN]
    train(tmp_path, glmrag_cache, [*overrides, "trainer=ddp_cpu"])
    (entry,) = stored(tmp_path)  # one results-store entry: rank 1 files nothing
    output_dir = Path(entry["run"]["output_dir"])
    assert sorted(p.name for p in output_dir.glob("*.log")) == ["train.log", "train_ddp_rank_1.log"]  # two ranks
    assert [p.parent.name for p in output_dir.glob("*/metrics.json")] == ["eval"]  # one evaluation
    assert set(entry["systems"]) == {entry["reference"], "untrained", "ppr"} and "test/recall@2" in entry["trainer"]
    if system == "gfm_rag":  # KG-completion pretraining ran under DDP, then the fine-tuning started from it
        assert (Path(entry["run"]["best_checkpoint"]).parent / "pretrain" / "last.ckpt").is_file()
    single = one_process_validation(train_config, overrides, entry["run"]["best_checkpoint"])
    for name in VAL_METRICS:
        assert entry["trainer"][name] == pytest.approx(single[name], abs=1e-5), name


def test_ddp_multirun_gives_each_job_its_ranks_and_logs_the_global_loss(glmrag_cache, tmp_path):
    overrides = ["experiment=demo", "model.gnn.hidden_channels=8", "model.gnn.num_layers=1,2", *RUN]
    train(tmp_path, glmrag_cache, [*overrides, "trainer=ddp_cpu"], multirun=True)
    entries = stored(tmp_path)
    assert sorted(e["run"]["settings"]["model.gnn.num_layers"] for e in entries) == [1, 2]  # each job once
    jobs = sorted({Path(e["run"]["output_dir"]) for e in entries})
    assert len(jobs) == 2 and all((j / "train_ddp_rank_1.log").is_file() for j in jobs)

    one = tmp_path / "one"  # the same first job in one process: train/loss over the whole global batch
    one.mkdir()
    train(one, glmrag_cache, [*SYSTEMS["gfm_rag_plus"], *RUN, "trainer=cpu"])
    (single,) = stored(one)
    ddp_job = next(e for e in entries if e["run"]["settings"]["model.gnn.num_layers"] == 1)
    ddp_loss = logged(Path(ddp_job["run"]["output_dir"]), "train/loss")
    one_loss = logged(Path(single["run"]["output_dir"]), "train/loss")
    assert [s for s, _ in ddp_loss] == [s for s, _ in one_loss] == [0, 1]
    assert [v for _, v in ddp_loss] == pytest.approx([v for _, v in one_loss], abs=1e-5)
