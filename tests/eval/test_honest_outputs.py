"""Outputs that cannot mislead: held-out splits for checkpoints, flagged overlap, no empty correction note."""

from pathlib import Path

import pytest
import torch

from glmrag.eval import evaluate, format_markdown
from glmrag.eval.overlap import choose_split
from glmrag.retrievers.base import Ranking

HPARAMS = {"datasets": ["musique100"], "train_split": "train", "val_split": "validation", "test_split": "test"}


@pytest.fixture
def retrievers(tmp_path):
    """An eval config's retriever node: one checkpoint trained on musique100, one baseline."""
    path = tmp_path / "gnn.ckpt"
    torch.save({"state_dict": {}, "datamodule_hyper_parameters": HPARAMS}, path)
    return {"gnn": {"_target_": "x", "ckpt_path": str(path)}, "ppr": {"_target_": "y"}}


def test_a_checkpoint_is_scored_on_its_held_out_split_by_default(retrievers):
    assert choose_split("musique100", None, retrievers) == ("test", {})
    assert choose_split("musique100", "test", retrievers) == ("test", {})
    assert choose_split("2wiki_test", None, retrievers) == (None, {})  # not trained on it: every question
    assert choose_split("musique100", None, {"ppr": {"_target_": "y"}}) == (None, {})


@pytest.mark.parametrize("split", ["train", "validation"])
def test_a_seen_split_is_refused_unless_allowed_and_then_flagged(retrievers, split, index, questions):
    with pytest.raises(ValueError, match=f"retriever gnn .* on the '{split}' split of musique100.*data.split=test"):
        choose_split("musique100", split, retrievers)
    chosen, overlap = choose_split("musique100", split, retrievers, allow_overlap=True)
    assert (chosen, overlap) == (split, {"gnn": f"its {split} split"})

    rankings = [Ranking(q.id, ["p0", "p1", "p2", "p3", "p4"], [5.0, 4, 3, 2, 1]) for q in questions]
    result = evaluate({"gnn": rankings, "ppr": rankings}, questions, index, reference="gnn", n_boot=50)
    result.train_overlap = overlap
    md = format_markdown(result)
    assert "| gnn (ref) (trained on these questions) |" in md and "| ppr |" in md
    assert f"**Warning: evaluated on questions it trained or selected on (gnn on its {split} split)" in md


def test_one_system_gets_no_multiple_comparison_note(index, questions):
    rankings = [Ranking(q.id, ["p0", "p1", "p2", "p3", "p4"], [5.0, 4, 3, 2, 1]) for q in questions]
    one = format_markdown(evaluate({"ppr": rankings}, questions, index, reference="ppr", n_boot=50))
    assert "Holm-Bonferroni" not in one
    two = evaluate({"ppr": rankings, "dense": rankings}, questions, index, reference="ppr", n_boot=50, min_paired=2)
    two = format_markdown(two)
    assert "Holm-Bonferroni corrected over 2 comparisons" in two  # Recall@2 and Recall@5 of dense vs ppr


def test_where_a_run_is_written_or_logged_is_never_a_swept_column():
    from glmrag.eval.store import StoredRun
    from glmrag.eval.study_tables import swept_keys

    def run(i: int, hidden: int) -> StoredRun:
        over = [f"model.hidden_channels={hidden}", f"logger={['csv', 'wandb'][i % 2]}", f"output_dir=out/{i}"]
        over += [f"results_dir=res/{i}", f"hydra.run.dir=x{i}", f"checkpoint_dir=c{i}"]
        return StoredRun(f"r{i}", None, {"run": {"family": "gnn", "overrides": over, "eval_data": "musique100"}})

    assert swept_keys([run(0, 32), run(1, 64)]) == ["model.hidden_channels"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowStart:
    """A retriever whose first call costs 10 s of setup, and every question 0.1 s (on a fake clock)."""

    name = "slow_start"

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.ready, self.calls = clock, False, 0

    def retrieve(self, questions, index, corpus, top_k=10):
        self.calls += 1
        self.clock.now += (0.0 if self.ready else 10.0) + 0.1 * len(questions)
        self.ready = True
        return [Ranking(q.id, ["p0"], [1.0]) for q in questions]


class Answering(SlowStart):
    answers: dict = {}


def test_setup_and_per_question_time_are_reported_apart(monkeypatch, questions, index):
    from glmrag.eval import timing

    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    slow = SlowStart(clock)
    rankings, setup, ms = timing.timed_retrieve(slow, questions, index, None, top_k=1)
    assert len(rankings) == len(questions) and slow.calls == 2
    assert setup == pytest.approx(10.0) and ms == pytest.approx(100.0)  # not (10 + 0.6 + 0.1) / 6 s

    answering = Answering(clock)  # one call only: setup not separated, per question includes it
    _, setup, ms = timing.timed_retrieve(answering, questions, index, None, top_k=1)
    assert answering.calls == 1 and setup is None and ms == pytest.approx(1000 * (10.0 + 0.6) / 6)

    result = evaluate({"slow": rankings}, questions, index, n_boot=20)
    result.ms_per_question, result.setup_seconds = {"slow": 100.0}, {"slow": 10.0}
    assert "| slow | 10.0 | 100.0 |" in format_markdown(result)


def test_every_breakdown_series_has_its_own_colour_and_equal_values_stay_visible(monkeypatch, tmp_path):
    from glmrag.eval import study_plots
    from glmrag.eval.store import StoredRun

    figures = []
    monkeypatch.setattr(study_plots, "_save", lambda fig, path: figures.append(fig) or Path(path))
    same = {"2": {"n": 10, "recall@2": 0.5}, "3": {"n": 5, "recall@2": 0.25}}  # every system scores the same

    def run(name: str) -> StoredRun:
        breakdowns = {"hops": {name: same, "dense": same, "ppr": same}}
        return StoredRun(name, None, {"systems": [name, "dense", "ppr"], "reference": name, "breakdowns": breakdowns})

    study_plots.plot_breakdown([run("glm_a"), run("glm_b")], "hops", tmp_path / "b.png")
    lines = figures[0].axes[0].lines
    assert [ln.get_label() for ln in lines] == ["glm_a", "glm_b", "dense (dashed)", "ppr (dashed)"]
    assert len({ln.get_color() for ln in lines}) == 4  # dense and ppr are no longer both grey
    assert len({tuple(ln.get_xdata()) for ln in lines}) == 4  # dodged: no line hides another
    assert [ln.get_linestyle() for ln in lines] == ["-", "-", "--", "--"]  # the legend's "dashed" is true
