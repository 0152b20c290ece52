"""The evaluation's breakdown figures: CIs per bucket, small buckets marked, no figure that repeats another."""

from pathlib import Path

import numpy as np
import pytest

from glmrag.data.types import Question
from glmrag.eval import evaluate
from glmrag.eval.breakdowns import group_means, row_bucket
from glmrag.eval.store import StoredRun
from glmrag.eval.study_plots import SMALL_N, evaluation_figures, figure_labels, plot_breakdown, repeated_groupings
from glmrag.retrievers.base import Ranking

GOOD, BAD = ["p0", "p1", "p2", "p3", "p4"], ["p3", "p4", "p2", "p1", "p0"]


def _questions(two_hop_hops: int | None) -> list[Question]:
    """12 one-passage questions (hops 1) and 3 two-passage ones (hops ``two_hop_hops``)."""
    one = [Question(f"a{i}", "?", ("x",), ("p0",), hops=1) for i in range(12)]
    two = [Question(f"b{i}", "?", ("x",), ("p0", "p1"), hops=two_hop_hops) for i in range(3)]
    return one + two


def _result(index_factory, questions):
    index = index_factory({q.id: [0] for q in questions})
    half = {q.id: GOOD if i % 2 else BAD for i, q in enumerate(questions)}  # recall@2 alternates 1 / 0 on 1-passage
    rankings = {
        "glm": [Ranking(q, p, [-float(i) for i in range(5)]) for q, p in half.items()],
        "dense": [Ranking(q.id, GOOD, [-float(i) for i in range(5)]) for q in questions],
    }
    return evaluate(rankings, questions, index, reference="glm", n_boot=200, seed=0)


def test_group_means_with_n_boot_adds_a_bootstrap_interval_per_metric():
    values = {"recall@2": [1.0, 0.0, 1.0, 0.0, 0.5, 0.5, None]}
    out = group_means(values, ["1", "1", "1", "1", "2", "2", "2"], n_boot=500, seed=0)
    low, high = out["1"]["ci"]["recall@2"]
    assert 0.0 <= low < 0.5 < high <= 1.0  # the mean of 1, 0, 1, 0 is uncertain
    assert out["2"]["ci"]["recall@2"] == [0.5, 0.5]  # equal values: no spread
    assert "ci" not in group_means(values, ["1"] * 7)["1"]  # without n_boot: the means alone, as before


def test_row_bucket_labels_rows_as_the_evaluator_buckets_questions():
    row = {"n_supporting": 2, "hops": None, "depth_bucket": "unreachable", "density_bucket": "low"}
    assert [row_bucket(row, g) for g in ("n_supporting", "hops", "depth", "density")] == [
        "2",
        "unknown",
        "unreachable",
        "low",
    ]
    with pytest.raises(ValueError, match="unknown grouping 'size'"):
        row_bucket(row, "size")


def test_hops_equal_to_supporting_passages_draw_one_figure_naming_both(index_factory, tmp_path, monkeypatch):
    """Issue 25 item 12: on MuSiQue hops = supporting passages, and the two figures were the same picture."""
    from glmrag.eval import study_plots

    figures = []
    save = study_plots._save
    monkeypatch.setattr(study_plots, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    paths = evaluation_figures(_result(index_factory, _questions(two_hop_hops=2)), tmp_path)
    assert sorted(paths) == ["recall_by_hops.png"]
    (fig,) = figures
    assert fig.axes[0].get_title() == "Recall@2 by hops = supporting passages"
    assert figure_labels(paths["recall_by_hops.png"]) == ["glm", "dense (dashed)"]


def test_breakdown_figures_show_cis_and_mark_small_buckets(index_factory, tmp_path, monkeypatch):
    from glmrag.eval import study_plots

    figures = []
    monkeypatch.setattr(study_plots, "_save", lambda fig, path: figures.append(fig) or Path(path))
    paths = evaluation_figures(_result(index_factory, _questions(two_hop_hops=None)), tmp_path)
    assert sorted(paths) == ["recall_by_hops.png", "recall_by_n_supporting.png"]  # unknown hops: they differ
    ax = figures[1].axes[0]  # n_supporting: buckets 1 (n=12) and 2 (n=3)
    glm = ax.lines[0]
    assert glm.get_label() == "glm"
    xs = glm.get_xdata()
    assert np.isnan(xs[1]) and len(xs) == 3  # the small bucket is not joined to its neighbour
    bars = ax.collections[[type(c).__name__ for c in ax.collections].index("LineCollection")]
    (low, high), *_ = [seg[:, 1] for seg in bars.get_segments()]
    assert low < 50.0 < high  # glm's recall@2 on the 12 one-passage questions: 6 of 12, CI around 50
    hollow = [c for c in ax.collections if type(c).__name__ == "PathCollection" and c.get_facecolor()[0][0] == 1.0]
    assert hollow and len(hollow[0].get_offsets()) == 1  # the n=3 bucket, hollow
    assert f"n < {SMALL_N}" in ax.get_xlabel() and "95% bootstrap CI" in ax.get_xlabel()


def test_repeated_groupings_compare_every_run():
    same = {"1": {"n": 12, "recall@2": 0.5}, "2": {"n": 3, "recall@2": 1.0}}
    other = {"1": {"n": 12, "recall@2": 0.5}, "unknown": {"n": 3, "recall@2": 1.0}}

    def run(name, hops):
        breakdowns = {"hops": {name: hops}, "n_supporting": {name: same}}
        return StoredRun(name, None, {"systems": [name], "reference": name, "breakdowns": breakdowns})

    assert repeated_groupings([run("a", same)]) == {"n_supporting": "hops"}
    assert repeated_groupings([run("a", same), run("b", other)]) == {}
    assert plot_breakdown([run("a", same)], "n_supporting", "unused.png") is None
