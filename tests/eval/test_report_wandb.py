"""``python -m glmrag.jobs.report <dir> --wandb``: the report's figures and tables logged to an offline wandb run."""

from __future__ import annotations

import csv
import json
import sys
import time

import pytest

from glmrag.eval.store import run_record, write_run
from glmrag.jobs.report import cli, main

PNG = b"\x89PNG\r\n\x1a\n"


def _iv(mean: float) -> dict:
    return {"mean": mean, "low": mean - 0.1, "high": mean + 0.1, "n": 20}


def write_study(root) -> None:
    """Two stored runs of a triplet-budget sweep (GLM-RAG Table 3 layout), each with dense as baseline."""
    for budget, r2 in ((300, 0.3), (600, 0.45)):
        ref = f"glm_t{budget}"
        metrics = {
            "systems": [ref, "dense"],
            "reference": ref,
            "ks": [2, 5],
            "counts": {"questions": 20, "evaluated": 20, "excluded_no_gold": 0},
            "settings": {"n_boot": 1000},
            "metrics": ["recall@2", "recall@5"],
            "overall": {ref: {"recall@2": _iv(r2), "recall@5": _iv(0.6)}, "dense": {"recall@2": _iv(0.4)}},
            "breakdowns": {"hops": {ref: {"2": {"n": 20, "recall@2": r2}}, "dense": {"2": {"n": 20, "recall@2": 0.4}}}},
            "significance": [],
        }
        run = {"family": "glm_rag", "settings": {"model.max_triplets": budget}, "overrides": [f"+system={ref}"]}
        write_run(root, ref, metrics | run_record(None, run | {"eval_data": "musique100", "num_parameters": 10}), "")


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """wandb offline into ``tmp_path/wandb_dir``, with no login and no home folder of the user's."""
    folder = tmp_path / "wandb_dir"
    folder.mkdir()
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(folder))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return folder


@pytest.mark.integration  # an offline wandb run (3.5 s)
def test_report_logs_figures_and_tables_to_an_offline_run(tmp_path, offline_wandb, capsys, monkeypatch):
    wandb = pytest.importorskip("wandb")
    inits, real_init = [], wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kwargs: inits.append(kwargs) or real_init(**kwargs))
    write_study(tmp_path / "res")
    assert cli(["report", str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--wandb"]) == 0
    (run,) = (offline_wandb / "wandb").glob("offline-run-*")
    assert capsys.readouterr().out.strip().endswith(f"wandb run: {run}")
    pngs = sorted(p.stem for p in (tmp_path / "out").glob("*.png"))
    assert pngs == ["recall_by_hops", "recall_by_model_max_triplets", "recall_by_model_max_triplets_at5"]
    images = sorted((run / "files" / "media" / "images").glob("*.png"))
    assert [p.name.rsplit("_", 2)[0] for p in images] == pngs  # <key>_<step>_<hash>.png
    for image in images:
        source = tmp_path / "out" / f"{image.name.rsplit('_', 2)[0]}.png"
        assert image.read_bytes().startswith(PNG) and image.read_bytes() == source.read_bytes()
    tables = {
        p.name.rsplit("_", 2)[0]: json.loads(p.read_text()) for p in (run / "files" / "media" / "table").glob("*")
    }
    assert set(tables) == {"paper_table", "runs"}
    with (tmp_path / "out" / "paper_table.csv").open() as f:
        header, *rows = list(csv.reader(f))
    assert tables["paper_table"]["columns"] == header and len(tables["paper_table"]["data"]) == len(rows) == 4
    # numbers stay numbers: Recall@2 of the 300-triplet GLM, its budget, and no budget-less row
    first = dict(zip(header, tables["paper_table"]["data"][0], strict=True))
    assert (first["model.max_triplets"], first["family"], first["metric"]) == (300, "glm_rag", "recall@2")
    assert first["mean"] == pytest.approx(0.3)
    assert len(tables["runs"]["data"]) == 4  # two runs x (trained system, dense)
    (init,) = inits  # one run: project glmrag, job type report, the results folder in its config
    assert (init["project"], init["job_type"], init["name"]) == ("glmrag", "report", "report-res")
    assert init["config"]["results_dir"] == str(tmp_path / "res") and init["mode"] is None  # WANDB_MODE decides
    assert b"glmrag" in written_log(next(run.glob("*.wandb")), b"glmrag")


def written_log(path, expected: bytes, patience: float = 30.0) -> bytes:
    """The run's transaction log once it holds ``expected``, or as it is after ``patience`` s: wandb-core writes
    it from a process of its own, and on a loaded machine its records were seen to land after ``finish()``
    returned (CI saw the 7-byte header alone)."""
    deadline = time.monotonic() + patience
    while expected not in (data := path.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return data


def test_without_the_flag_wandb_is_never_imported(tmp_path, monkeypatch):
    write_study(tmp_path / "res")
    monkeypatch.setitem(sys.modules, "wandb", None)  # any `import wandb` now raises ImportError
    assert main([str(tmp_path / "res"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.md").is_file() and not list(tmp_path.rglob("wandb"))
    with pytest.raises(ImportError, match="--wandb needs the wandb package"):
        main([str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--wandb"])
