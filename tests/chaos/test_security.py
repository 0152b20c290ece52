"""No code from a checkpoint or index file ever runs, an index manifest lists exactly its format's files, and no
dataset name reaches outside the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glmrag.data import registry
from glmrag.data.registry import load_dataset
from glmrag.index.cache import get_index
from glmrag.io import CheckpointPathError, load_checkpoint_dict
from glmrag.jobs.evaluate import run_eval
from glmrag.retrievers.checkpoint import CheckpointRetriever
from tests.chaos.conftest import ROOT, compose_config, file_handler, write_evil_checkpoint

pytestmark = pytest.mark.chaos


@pytest.mark.integration  # python train.py in a subprocess
def test_train_refuses_a_checkpoint_url_and_runs_nothing_from_it(tmp_path, serve):
    marker = tmp_path / "pwned"
    evil = write_evil_checkpoint(tmp_path / "evil.ckpt", marker)
    url = serve(file_handler(evil.read_bytes())) + "/evil.ckpt"
    cmd = [
        sys.executable,
        "train.py",
        "experiment=demo",
        f"ckpt_path={url}",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"checkpoint_dir={tmp_path / 'ck'}",
        f"results_dir={tmp_path / 'res'}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLMRAG_CACHE_DIR": str(tmp_path / "cache")}
    # A hang guard, not a time limit: refusing takes ~13 CPU-s, but 190 s of wall at load 12 on two shared cores.
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert not marker.exists(), "code from the downloaded checkpoint ran"
    assert done.returncode != 0
    assert "remote checkpoints are refused" in done.stderr and url in done.stderr


def test_checkpoint_retriever_refuses_a_url(tmp_path, serve):
    marker = tmp_path / "pwned"
    url = serve(file_handler(write_evil_checkpoint(tmp_path / "e.ckpt", marker).read_bytes())) + "/e.ckpt"
    with pytest.raises(CheckpointPathError, match="remote checkpoints are refused"):
        CheckpointRetriever(url)
    assert not marker.exists()


def test_local_malicious_checkpoint_is_refused_weights_only(tmp_path):
    marker = tmp_path / "pwned"
    path = write_evil_checkpoint(tmp_path / "evil.ckpt", marker)
    with pytest.raises(CheckpointPathError, match="not a weights-only checkpoint"):
        load_checkpoint_dict(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [(None, "ckpt_path is not set"), ("/nonexistent/best.ckpt", "/nonexistent/best.ckpt: no such checkpoint")],
)
def test_unset_or_missing_checkpoint_names_the_path(value, message):
    with pytest.raises(CheckpointPathError, match=message):
        CheckpointRetriever(value)


def test_manifest_without_a_required_entry_is_refused(tmp_path):
    from glmrag.index.store import StaleIndexError, load_index, save_index
    from tests.index.test_store import _index

    folder = save_index(_index(), tmp_path / "idx")
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]["entity_embeddings.npy"]  # checksums of the rest still match
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StaleIndexError, match=r"missing: \['entity_embeddings.npy'\]"):
        load_index(folder)


@pytest.mark.parametrize("name", ["../../../../tmp/x/escape", "/tmp/abs", ".hidden", "a b", ""])
def test_a_dataset_name_cannot_leave_the_cache(name, tiny_musique_files, tmp_path, monkeypatch):
    """Issue 37, probe 16: ``data.name`` names cache folders; one with a path in it built its index outside."""
    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))
    questions, corpus = tiny_musique_files
    data = ["data=files", "data.format=hipporag", f"data.name={name!r}" if name else "data.name=''"]
    data += [f"data.questions={questions}", f"data.corpus={corpus}", "retriever=[dense]"]
    cfg = compose_config("eval", [*data, f"output_dir={tmp_path / 'out'}", f"results_dir={tmp_path / 'r'}"])
    with pytest.raises(ValueError, match=r"data.name=.*: a dataset name names cache folders"):
        run_eval(cfg)
    assert name not in registry.DATASETS
    dataset = load_dataset("toy")
    dataset.name = name  # the Python API can hand get_index a Dataset of any name
    with pytest.raises(ValueError, match=r"a dataset name names cache folders"):
        get_index(dataset, compose_config("eval", ["data=toy", "output_dir=unused"]).index)
    assert not list(Path("/tmp/x").glob("escape-*"))  # where the first name's index went before
