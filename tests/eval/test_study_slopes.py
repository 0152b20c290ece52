"""Slopes per doubling of training questions (glmrag.eval.study_slopes) on hand-made stored runs."""

from __future__ import annotations

import numpy as np
import pytest

from glmrag.eval.store import read_runs, write_run
from glmrag.eval.study_slopes import _p_text, data_scaling, format_slopes_markdown
from glmrag.jobs.report import build_report

QUESTIONS = 60


def file_run(folder, family: str, n: int, scores: np.ndarray, eval_data: str = "2wiki_dev") -> None:
    """A stored training run of ``family`` on ``n`` questions whose trained system scored ``scores``."""
    system = f"{family}-n{n}"
    ids = [f"q{i}" for i in range(len(scores))]
    record = {
        "systems": [system],
        "reference": system,
        "overall": {system: {"recall@2": {"mean": float(scores.mean()), "low": 0.0, "high": 1.0, "n": len(scores)}}},
        "counts": {"evaluated": len(scores)},
        "per_question": {"question_ids": ids, "recall@2": {system: [float(v) for v in scores]}},
        "run": {"family": family, "train_questions": n, "eval_data": eval_data},
    }
    write_run(folder, system, record, "")


def scores_with_mean(rng: np.random.Generator, mean: float) -> np.ndarray:
    """0/1 scores of exactly ``mean`` over the questions, in random order."""
    hits = round(mean * QUESTIONS)
    return rng.permutation(np.r_[np.ones(hits), np.zeros(QUESTIONS - hits)])


@pytest.fixture
def study(tmp_path):
    """A GLM gaining 10 points per doubling from below, a GNN gaining 2.5 from above, on the same questions."""
    rng = np.random.default_rng(0)
    for n, glm, gnn in ((45, 0.2, 0.6), (90, 0.3, 0.6333), (180, 0.4, 0.65), (360, 0.5, 0.6833)):
        file_run(tmp_path, "glm", n, scores_with_mean(rng, glm))
        file_run(tmp_path, "gnn", n, scores_with_mean(rng, gnn))
    return tmp_path


def test_slope_is_the_least_squares_fit_on_log2_questions_with_a_ci(study):
    (glm, gnn), _ = data_scaling(read_runs(study), "recall@2")["2wiki_dev"]
    for fit in (glm, gnn):
        x = np.log2(fit.train_questions)
        slope, intercept = np.polyfit(x, fit.means, 1)
        assert fit.slope.mean == pytest.approx(slope) and fit.intercept == pytest.approx(intercept)
        assert fit.slope.low < fit.slope.mean < fit.slope.high
    assert glm.train_questions == (45, 90, 180, 360) and glm.slope.mean == pytest.approx(0.10)


def test_slopes_that_differ_give_a_projected_crossing_and_equal_ones_none(study, tmp_path):
    _, (comparison,) = data_scaling(read_runs(study), "recall@2")["2wiki_dev"]
    (glm, gnn), _ = data_scaling(read_runs(study), "recall@2")["2wiki_dev"]
    assert comparison.diff.mean == pytest.approx(glm.slope.mean - gnn.slope.mean)
    assert comparison.p_value < 0.05
    x = (gnn.intercept - glm.intercept) / (glm.slope.mean - gnn.slope.mean)
    assert comparison.crossing == pytest.approx(2**x) and comparison.crossing > 360
    assert glm.at(comparison.crossing) == pytest.approx(gnn.at(comparison.crossing))
    assert "a projection, assuming both keep their measured log-linear slopes beyond 360" in comparison.verdict
    assert f"(p = {comparison.p_value:.3f})" in comparison.verdict
    # no resample as extreme: the least p that 1,000 resamples give is a bound, not a value (issue 52's report)
    assert _p_text(1 / 1001, 1000) == "p ≤ 0.001" and _p_text(2 / 1001, 1000) == "p = 0.002"

    rng = np.random.default_rng(1)  # two families gaining the same 5 points per doubling
    for n, mean in ((45, 0.3), (90, 0.35), (180, 0.4), (360, 0.45)):
        file_run(tmp_path / "same", "a", n, scores_with_mean(rng, mean))
        file_run(tmp_path / "same", "b", n, scores_with_mean(rng, mean + 0.1))
    _, (same,) = data_scaling(read_runs(tmp_path / "same"), "recall@2")["2wiki_dev"]
    assert same.diff.mean == pytest.approx(0.0, abs=1e-12) and same.p_value > 0.5
    assert "do not differ significantly" in same.verdict and "no crossing is projected" in same.verdict


def test_the_report_has_the_section_and_older_runs_without_scores_none(study, tmp_path):
    markdown = format_slopes_markdown(read_runs(study), ["recall@2"])
    assert "## Recall@2 per doubling of training questions, on 2wiki_dev" in markdown
    assert "| glm | 45: 20.0, 90: 30.0, 180: 40.0, 360: 50.0 | +10.0 [" in markdown
    assert "- glm - gnn: +" in markdown
    assert "Recall@2 per doubling" in (build_report(study)["report.md"]).read_text()
    for run in read_runs(study):  # runs filed before per-question scores were stored: no slopes, no error
        record = {k: v for k, v in run.metrics.items() if k != "per_question"}
        write_run(tmp_path / "old", run.run_id, record, "")
    assert format_slopes_markdown(read_runs(tmp_path / "old"), ["recall@2"]) == ""


def test_a_family_with_one_point_has_no_slope(tmp_path):
    file_run(tmp_path, "glm", 360, scores_with_mean(np.random.default_rng(0), 0.5))
    assert data_scaling(read_runs(tmp_path), "recall@2") == {}
