"""The Python API: every ``python`` block of docs/python_api.md runs, in order, in one namespace."""

import re
from pathlib import Path

import pytest

import glmrag
from glmrag.jobs.config_check import ConfigError

DOC = Path(__file__).resolve().parents[1] / "docs" / "python_api.md"


def doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_doc_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))
    blocks = doc_blocks()
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "| ppr |" in out and "| dense (ref) |" in out  # the toy table
    assert out.count("Lyon |") == 1  # the best passage for "Where is Lyon?" is Lyon's
    rows = namespace["table"].rows
    assert [r["system"] for r in rows] == ["dense", "ppr (0.5)"]
    assert all(r["recall@2"] == 1.0 for r in rows)  # one gold passage among three, two ranked


def test_the_api_is_exported_and_errors_name_the_fix():
    assert set(glmrag.__all__) >= {"load_data", "build_index", "get_retriever", "retrieve", "evaluate_systems"}
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", glmrag.__version__)
    with pytest.raises(ValueError, match="no retriever config 'pr'; known: .*ppr"):
        glmrag.get_retriever("pr")
    with pytest.raises(TypeError, match=r"unknown settings \['synonym_treshold'\]"):
        glmrag.build_index(glmrag.load_data("toy"), synonym_treshold=0.5)


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"ks": [1.5]}, "ks"),
        ({"top_k": 1}, "top_k"),  # a 1-deep ranking would report Recall@5
        ({"top_k": -5}, "top_k"),
        ({"n_boot": 0}, "n_boot"),
    ],
)
def test_the_api_refuses_what_eval_py_refuses(tmp_path, monkeypatch, settings, key):
    """Probes: ks=[1.5] printed a Recall@1 column, top_k=1 a Recall@5 of 75.0, top_k=-5 an all-zero table,
    n_boot=0 a numpy error. The API now runs eval.py's check, before any work."""
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("glmrag.api.build_index", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(ConfigError, match=rf"^{key}="):
        glmrag.evaluate_systems(["dense"], glmrag.load_data("toy"), **settings)


def test_one_system_by_name_and_an_index_of_another_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))
    toy = glmrag.load_data("toy")
    index = glmrag.build_index(toy)
    assert glmrag.evaluate_systems("dense", toy, index, n_boot=50).rows[0]["system"] == "dense"
    other = glmrag.load_data("toy")
    other.corpus = type(toy.corpus)(list(toy.corpus)[:-1])
    with pytest.raises(ConfigError, match="index: built from another corpus"):
        glmrag.evaluate_systems(["ppr"], other, index)


def test_train_runs_the_training_job_and_returns_the_run(tiny_musique, glmrag_cache, tmp_path):
    """glmrag.train(overrides) is train.py's job: it trains, checkpoints and files the run (its evaluation and
    test are train.py's own, tested through it)."""
    overrides = [
        "experiment=demo",
        f"data.name={tiny_musique}",
        "model.gnn.hidden_channels=8",
        "model.gnn.num_layers=1",
    ]
    overrides += ["trainer.max_epochs=1", "logger=[csv]", "evaluate=false", "test=false"]
    overrides += [
        f"output_dir={tmp_path / 'out'}",
        f"checkpoint_dir={tmp_path / 'ck'}",
        f"results_dir={tmp_path / 'r'}",
    ]
    run = glmrag.train(overrides)
    assert run.run_name == "gfm_rag_plus_demo-musique_tiny-hidden_channels@8+num_layers@1+max_epochs@1"
    assert run.best_checkpoint is not None and run.best_checkpoint.parent == tmp_path / "ck"
    assert run.best_checkpoint.is_file() and "val/recall@2" in run.metrics and run.evals == {}
    assert [p.parent for p in run.stored] == [tmp_path / "r"]
