"""EvalResult's typed fields: what the evaluator and the evaluation job measured, written to metrics.json in its
flat ``settings`` object and read back as the same fields; warnings above the table."""

import json

from glmrag.eval import evaluate, format_markdown, write_outputs
from glmrag.eval.result import EvalSettings
from glmrag.eval.significance import Interval
from glmrag.retrievers.base import Ranking


def _result(index, questions):
    rankings = [Ranking(q.id, ["p0", "p1", "p2", "p3", "p4"], [5.0, 4, 3, 2, 1]) for q in questions]
    return evaluate({"gnn": rankings, "ppr": rankings}, questions, index, reference="gnn", n_boot=50, seed=3)


def test_the_evaluator_fills_typed_settings(index, questions):
    result = _result(index, questions)
    assert isinstance(result.settings, EvalSettings)
    assert (result.settings.n_boot, result.settings.seed, result.settings.test) == (50, 3, "bootstrap")
    assert result.settings.tested_metrics == ["recall@2", "recall@5"] and result.settings.level == 0.95
    assert (result.ms_per_question, result.qa, result.warnings) == ({}, None, [])  # the job fills these


def test_typed_fields_survive_metrics_json(index, questions, tmp_path):
    result = _result(index, questions)
    result.ms_per_question, result.setup_seconds = {"gnn": 2.5, "ppr": 1.0}, {"gnn": None, "ppr": 0.5}
    result.train_overlap = {"gnn": "its train split"}
    result.qa_baselines = {"no_context": {"em": Interval(0.5, 0.25, 0.75, 4), "f1": Interval(0.6, 0.4, 0.8, 4)}}
    result.warnings = ["Warning: training did not help."]
    write_outputs(result, tmp_path)

    stored = json.loads((tmp_path / "metrics.json").read_text())
    settings = stored["settings"]  # the flat object earlier runs have: study tables and old readers still read it
    assert settings["n_boot"] == 50 and settings["ms_per_question"] == {"gnn": 2.5, "ppr": 1.0}
    assert settings["train_overlap"] == {"gnn": "its train split"} and settings["qa_baselines"]["no_context"]
    assert not {"llm_cost", "qa", "acc_llm_judge", "config"} & set(settings)  # unset job fields are left out
    assert stored["warnings"] == ["Warning: training did not help."]


def test_warnings_come_above_the_table(index, questions):
    result = _result(index, questions)
    result.warnings = ["Warning: first.", "Warning: second."]
    md = format_markdown(result)
    assert md.startswith("**Warning: first.**  \n**Warning: second.**\n\n| System |")
