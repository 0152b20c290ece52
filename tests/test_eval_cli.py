"""The evaluation job end to end, through Hydra, on the embedded toy and MuSiQue sets."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from glmrag.pipeline import run_eval

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _compose(overrides):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="eval", overrides=overrides)


def test_every_data_and_retriever_config_composes():
    for data in sorted(p.stem for p in (ROOT / "configs" / "data").glob("*.yaml")):
        cfg = _compose([f"data={data}", "output_dir=unused"])
        assert cfg.data.name == data
        assert set(cfg.retriever) == {"dense", "ppr"}
        assert cfg.index.extractor == cfg.data.extractor


def test_eval_job_on_toy_writes_metrics_for_both_retrievers(cache, tmp_path):
    out = tmp_path / "out"
    cfg = _compose(["data=toy", f"output_dir={out}", "n_boot=200"])
    result = run_eval(cfg)
    assert result.systems == ["dense", "ppr"]
    metrics = json.loads((out / "metrics.json").read_text())
    lines = (out / "per_question.jsonl").read_text().splitlines()
    assert len(lines) == 2  # two systems x one question
    assert "| dense (ref) |" in (out / "results.md").read_text()
    # the toy question's one gold passage is among the 3 passages: Recall@5 is 1 for any ranking
    assert json.dumps(metrics).count('"recall@5"') >= 2
    assert result.overall["ppr"]["recall@5"].mean == pytest.approx(1.0)
    assert (cache / "indexes").is_dir() and (cache / "embeddings").is_dir()


@pytest.mark.slow
def test_eval_script_on_musique_subset(cache, tmp_path):
    out = tmp_path / "mq"
    cmd = [sys.executable, "eval.py", "data.limit=20", "data.split=test", f"output_dir={out}", "n_boot=200"]
    cmd.append(f"results_dir={tmp_path / 'results'}")  # the results store, outside the repository
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    metrics = json.loads((out / "metrics.json").read_text())
    assert len({json.loads(line)["question_id"] for line in (out / "per_question.jsonl").open()}) == 20
    assert set(metrics["overall"]) == {"dense", "ppr"}
    assert (tmp_path / "results" / "eval-musique100" / "metrics.json").is_file()
