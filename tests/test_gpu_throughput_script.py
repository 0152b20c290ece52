"""benchmarks/gpu_train_throughput.py on CPU: tiny models, two steps each, the JSON it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_train_throughput.py"
RUN_KEYS = {
    "system",
    "model",
    "num_parameters",
    "global_batch",
    "steps",
    "warmup_steps",
    "timed_steps",
    "timed_questions",
    "seconds",
    "questions_per_s",
    "peak_gib",
    "val_recall@2",
    "val_questions",
}


@pytest.mark.slow  # builds the musique100 index and GNN inputs in a fresh cache: minutes on 2 cores
def test_cpu_smoke_run_writes_the_json(glmrag_cache, tmp_path):
    out = tmp_path / "results" / "throughput.json"
    argv = ["--device", "cpu", "--steps", "2", "--tiny", "--limit", "8", "--precision", "32-true", "--out", str(out)]
    env = os.environ | {"GLMRAG_CACHE_DIR": str(glmrag_cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [p.name for p in out.parent.iterdir()] == ["throughput.json"]  # written by rename, no temporary left
    assert result["precision"] == "32-true" and result["device"].startswith("cpu")
    assert [r["system"] for r in result["runs"]] == ["gfm_rag_plus", "glm_rag"]
    for run in result["runs"]:
        assert set(run) == RUN_KEYS
        assert (run["steps"], run["warmup_steps"], run["timed_steps"]) == (2, 1, 1)
        assert run["timed_questions"] == run["global_batch"]  # one timed step of one device's whole batch
        assert run["questions_per_s"] > 0 and run["seconds"] > 0
        assert run["questions_per_s"] == pytest.approx(run["timed_questions"] / run["seconds"], rel=1e-3)
        assert run["peak_gib"] is None  # no GPU
        assert 0.0 <= run["val_recall@2"] <= 1.0 and run["val_questions"] == 8
    gnn, glm = result["runs"]
    assert gnn["global_batch"] == 2 and (gnn["model"]["hidden_channels"], gnn["model"]["num_layers"]) == (8, 1)
    assert glm["global_batch"] == 2 and glm["model"]["encoder"] == "random" and glm["model"]["max_triplets"] == 30
    assert 0 < gnn["num_parameters"] < glm["num_parameters"]
    assert json.loads(done.stdout[done.stdout.index("{") :]) == result  # printed as written


def test_arguments_are_checked():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_train_throughput as script
    finally:
        sys.path.remove(str(SCRIPT.parent))
    args = script.parse_args(["--device", "cpu", "--steps", "2"])
    assert (args.warmup, args.systems, args.precision) == (1, ["gfm_rag_plus", "glm_rag"], "bf16-mixed")
    assert script.parse_args(["--device", "cpu"]).warmup == 10
    assert args.out == str(ROOT / "benchmarks" / "results" / "gpu_train_throughput.json")
    with pytest.raises(SystemExit):
        script.parse_args(["--device", "cpu", "--steps", "1"])  # no step left to time
    assert script.T5_SMALL == {"d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8, "d_kv": 64}


@pytest.mark.slow  # with tests/test_gpu_check.py, before a device session
def test_cpu_smoke_run_in_process_on_a_tiny_set(tiny_musique, glmrag_cache, tmp_path):
    """The quick default-run check of the script's code path (``fit(cfg, loggers)``, validation, JSON)."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_train_throughput as script
    finally:
        sys.path.remove(str(SCRIPT.parent))
    out = tmp_path / "throughput.json"
    argv = ["--device", "cpu", "--steps", "2", "--tiny", "--precision", "32-true", "--data", tiny_musique]
    result = script.main([*argv, "--out", str(out)])
    assert json.loads(out.read_text()) == result and result["data"] == tiny_musique
    assert [r["system"] for r in result["runs"]] == ["gfm_rag_plus", "glm_rag"]
    for run in result["runs"]:
        assert set(run) == RUN_KEYS and run["timed_steps"] == 1 and run["questions_per_s"] > 0
        assert run["val_questions"] == 3  # musique_tiny's validation split


def test_sizes_and_the_synthetic_data_are_checked():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_train_throughput as script
    finally:
        sys.path.remove(str(SCRIPT.parent))
    check = script.parse_args(["--device", "cpu", "--size", "check"])
    assert (check.data, check.systems, check.t5_size, check.backend) == (
        "synthetic",
        ["glm_rag"],
        "t5-large",
        ["eager", "flex"],
    )
    assert (check.steps, check.warmup, check.precision, check.workers) == (12, 4, "bf16-mixed", 4)
    assert script.parse_args(["--device", "cpu", "--size", "check", "--steps", "6"]).steps == 6  # a flag wins
    dry = script.parse_args(["--device", "cpu", "--size", "dry"])
    assert (dry.tiny, dry.kg, dry.steps, dry.warmup) == (True, "small", 2, 1)
    with pytest.raises(SystemExit):  # the synthetic data has GLM inputs only
        script.parse_args(["--device", "cpu", "--data", "synthetic", "--systems", "gfm_rag_plus"])


def test_synthetic_names_are_distinct_and_tokenised_word_by_word(tmp_path):
    """The synthetic KG's names are unique runs of 2-4 words, each one token of the synthetic tokenizer."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_train_throughput as script
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from glmrag.datamodules.glm_inputs import load_tokenizer

    kg, vocabulary = script.synthetic_kg("small")
    assert len(set(kg.entities)) == len(kg.entities) and len(set(kg.relations)) == len(kg.relations)
    assert {len(name.split()) for name in kg.entities} == {2, 3, 4}
    tokenizer = load_tokenizer(script.synthetic_tokenizer(vocabulary, tmp_path))
    ids = tokenizer(kg.entities[:50], add_special_tokens=False)["input_ids"]
    assert [len(x) for x in ids] == [len(name.split()) for name in kg.entities[:50]]
    assert tokenizer.unk_token_id not in {i for x in ids for i in x}
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)  # T5's, which GLMCollate pads with
    questions = script.synthetic_questions(kg, 5, seed=0, prefix="q")
    assert all(q.supporting and kg.seeds(q.id) for q in questions)
