"""experiment=cpu_2wiki as a whole job on the tiny MuSiQue set: the untrained model is its prior (PPR exactly,
or PPR fused with dense retrieval), and the evaluator scores the checkpoint as its own test step did."""

from pathlib import Path

import pytest

from glmrag.jobs.common import compose_config
from glmrag.jobs.train import run_train

pytestmark = pytest.mark.integration


def _overrides(tiny: str, tmp: Path, *extra: str) -> list[str]:
    """One epoch of the recipe at learning rate 0 (the weights never move) on ``tiny``, its files under ``tmp``."""
    return [
        "experiment=cpu_2wiki",
        f"data.name={tiny}",
        f"datamodule.datasets=[{tiny}]",
        "index.extractor=openie",
        "eval_data=null",
        "eval_split=test",
        "model.gnn.hidden_channels=8",
        "model.gnn.num_layers=1",
        "model.optimizer.lr=0.0",
        "trainer.max_epochs=1",
        "logger=[csv]",
        "callbacks.rich_progress_bar=null",
        "n_boot=20",
        f"output_dir={tmp / 'out'}",
        f"results_dir={tmp / 'results'}",
        f"checkpoint_dir={tmp / 'run'}",
        *extra,
    ]


def _recall(result, system: str, k: int) -> float:
    return result.overall[system][f"recall@{k}"].mean


def test_the_untrained_ppr_prior_ranks_exactly_as_ppr(tiny_musique, glmrag_cache, tmp_path):
    out = run_train(compose_config("train", _overrides(tiny_musique, tmp_path, "model.prior.dense_weight=null")))
    result = out["eval"]
    model, ppr = result.systems[0], "ppr"
    for row, reference in zip(result.per_question[model], result.per_question[ppr], strict=True):
        # the first two; further down, passages of equal PPR mass (often none) may swap: exp(log p) rounds
        assert row["top_passages"][:2] == reference["top_passages"][:2], row["question_id"]
    for k in (1, 2, 5, 10):
        assert _recall(result, model, k) == pytest.approx(_recall(result, ppr, k))
    assert out["warnings"]  # lr 0: no better than untrained, and the job says so


def test_the_evaluator_scores_the_fused_checkpoint_as_its_test_step(tiny_musique, glmrag_cache, tmp_path):
    out = run_train(compose_config("train", _overrides(tiny_musique, tmp_path)))
    result, metrics = out["eval"], out["metrics"]
    model = result.systems[0]
    for k in (1, 2, 5, 10):
        assert _recall(result, model, k) == pytest.approx(metrics[f"test/recall@{k}"], abs=1e-6)
    # the fusion differs from both of its parts on some question
    rows = {name: result.per_question[name] for name in (model, "dense", "ppr")}
    tops = [tuple(tuple(r["top_passages"][:2]) for r in rows[name]) for name in (model, "dense", "ppr")]
    assert tops[0] != tops[1] and tops[0] != tops[2]
