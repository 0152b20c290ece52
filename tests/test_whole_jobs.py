"""The parts of a whole training job that are quick to check: run names, devices, run ids, DDP state.

The jobs themselves run in ``tests/test_studies.py`` and ``tests/test_ddp_jobs.py``; resuming and preemption
in ``tests/test_resume.py``.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
from stand_ins import HashEncoder

from glmrag.data.files import register_data
from glmrag.index.synthetic import random_kg
from glmrag.jobs.config_check import validate_eval_config
from glmrag.jobs.config_path import RUN_ID_ENV, run_id
from glmrag.jobs.launch import LAUNCH_VARIABLES, job_processes
from glmrag.jobs.train import evaluation_config
from glmrag.models.gnn_module import GNNRetrieverModule
from glmrag.nn.graph_inputs import graph_inputs
from glmrag.nn.kgc import kgc_loss, sample_kgc_batch


def test_a_run_name_with_dots_keeps_its_checkpoint(train_config, tmp_path):
    """study_data_scaling names runs gnn-f0.5-...: the evaluation after training must find their checkpoint."""
    cfg = train_config(["experiment=study_data_scaling", "+system=gfm_rag_star", "datamodule.train_fraction=0.5"])
    cfg.output_dir = str(tmp_path)
    assert "." in cfg.run_name
    ckpt = tmp_path / "best.ckpt"
    torch.save({}, ckpt)
    register_data(cfg.data)
    eval_cfg = evaluation_config(cfg, str(ckpt), device="cuda:1")
    validate_eval_config(eval_cfg)  # raised "ckpt_path is not set": the run name was read as a key path
    node = eval_cfg.retriever[cfg.run_name]
    assert (node.ckpt_path, node.device) == (str(ckpt), "cuda:1")  # the evaluator runs where training ran


def test_run_id_follows_the_launcher(monkeypatch):
    for name in [n for n in os.environ if n.startswith("SLURM_")] + [RUN_ID_ENV]:
        monkeypatch.delenv(name, raising=False)
    assert time.strptime(run_id(), "%Y-%m-%d_%H-%M-%S")  # a start time
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    assert run_id() == "slurm-4242"  # a requeued batch job keeps its id, so its checkpoint folder
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4240")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert run_id() == "slurm-4240_2"
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")  # an interactive allocation: every run its own folder
    assert run_id() != "slurm-4240_2"
    monkeypatch.setenv(RUN_ID_ENV, "2026-01-01_00-00-00")  # a rank started by that job
    assert run_id() == "2026-01-01_00-00-00"


def test_a_job_leaves_no_launch_state_for_the_next(monkeypatch):
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")  # the user's own, kept
    with job_processes("run-1"):
        assert os.environ[RUN_ID_ENV] == "run-1"
        os.environ |= {"LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1234", "MASTER_ADDR": "127.0.0.1"}
    assert not {"LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", RUN_ID_ENV} & set(os.environ)
    assert os.environ["MASTER_ADDR"] == "10.0.0.1"


@pytest.mark.parametrize(
    ("use_node_features", "injection"), [(False, "all"), (True, "all"), (True, "seeds"), (True, "hidden_all")]
)
def test_kg_completion_gives_every_trainable_parameter_a_gradient(use_node_features, injection):
    """DDP raises on a step that leaves a trainable parameter without a gradient (no unused-parameter search)."""
    torch.manual_seed(0)
    index = random_kg(30, 90, seed=3)
    graph = graph_inputs(index, HashEncoder(16), node_features=False)
    if use_node_features:
        graph.node_features = torch.randn(graph.num_nodes, 16)
    sizes = {"hidden_channels": 8, "num_layers": 2, "question_dim": 16, "relation_dim": 16, "node_dim": 16}
    gnn = sizes | {"use_node_features": use_node_features, "query_injection": injection}
    module = GNNRetrieverModule(gnn=gnn, stage="kgc")
    batch = sample_kgc_batch(graph, torch.as_tensor(index.triples[:6]), None, 8, torch.Generator().manual_seed(0))
    kgc_loss(module.gnn, graph, batch).backward()
    missing = [n for n, p in module.named_parameters() if p.requires_grad and p.grad is None]
    assert missing == []
    assert any(p.requires_grad for p in module.gnn.question_proj.parameters()) == (
        use_node_features and injection != "hidden_all"
    )
    qa = GNNRetrieverModule(gnn=sizes)
    assert all(p.requires_grad for p in qa.parameters())  # fine-tuning trains everything
