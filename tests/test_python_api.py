"""The Python API: every ``python`` block of docs/python_api.md runs, in order, in one namespace."""

import re
from pathlib import Path

import pytest

import glmrag

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
