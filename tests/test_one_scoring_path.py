"""One scoring path: eval.py ranks a trained checkpoint's validation questions exactly as the module's validation
ranked them (the same passages in the same order), for a GNN and a GLM trained one epoch on musique_tiny."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import lightning as L
import pytest

from glmrag.eval.outputs import RANKINGS_FILE
from glmrag.jobs.common import compose_config, instantiate_datamodule
from glmrag.jobs.evaluate import run_eval
from glmrag.jobs.train import run_train

SYSTEMS = {
    "gnn": ["experiment=demo", "model.gnn.hidden_channels=8", "model.gnn.num_layers=1"],
    "glm": [
        "experiment=glm_demo",
        "model.glm.encoder_config={d_model: 16, d_ff: 32, num_layers: 1, num_heads: 2, d_kv: 8, dropout_rate: 0.0}",
        "model.subgraph.max_triplets=40",
        "model.evaluation.ranker=softmax_sum",  # passage scores that follow every logit, not only the top entities
        "datamodule.num_workers=0",
    ],
}

pytestmark = pytest.mark.usefixtures("glmrag_cache")


@pytest.fixture(scope="module", params=list(SYSTEMS))
def trained(request, tiny_musique, tmp_path_factory):
    """The training config and best checkpoint of a one-epoch run on musique_tiny (3 validation questions)."""
    tmp = tmp_path_factory.mktemp(request.param)
    overrides = [*SYSTEMS[request.param], f"data.name={tiny_musique}", "trainer.max_epochs=1", "logger=[csv]"]
    overrides += ["evaluate=false", "test=false", "callbacks.rich_progress_bar=null", f"output_dir={tmp / 'out'}"]
    overrides += [f"results_dir={tmp / 'results'}", f"checkpoint_dir={tmp / 'run'}"]
    cfg = compose_config("train", overrides)
    return cfg, Path(run_train(cfg)["best_checkpoint"])


def validation_rankings(cfg, ckpt: Path) -> dict[str, tuple[list[str], list[float]]]:
    """Question id -> the passages the module's validation ranked for it, best first (what it scored), and their
    scores."""
    datamodule = instantiate_datamodule(cfg)
    module = hydra.utils.get_class(cfg.model._target_).load_from_checkpoint(ckpt, kgs=datamodule)
    ranked, rank = {}, module.rank

    def recorded(batch, top_k, logits=None):
        rankings = rank(batch, top_k, logits)
        for ranking, real in zip(rankings, batch["real"].tolist(), strict=True):
            if real:  # not a padding row
                ranked[ranking.question_id] = (ranking.passage_ids, ranking.passage_scores)
        return rankings

    module.rank = recorded
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    return ranked


def eval_rankings(ckpt: Path, data: str, tmp: Path) -> dict[str, tuple[list[str], list[float]]]:
    """Question id -> the passages eval.py ranks for it on ``data``'s validation split and their scores (its
    ``rankings.jsonl``)."""
    overrides = ["retriever=[checkpoint]", f"ckpt_path={ckpt}", f"data.name={data}", "data.split=validation"]
    overrides += ["allow_train_overlap=true", f"output_dir={tmp / 'eval'}", f"results_dir={tmp / 'r'}", "n_boot=10"]
    run_eval(compose_config("eval", overrides))
    rows = [json.loads(line) for line in (tmp / "eval" / RANKINGS_FILE).read_text().splitlines()]
    return {row["question_id"]: (row["passage_ids"], row["passage_scores"]) for row in rows}


def test_eval_ranks_the_validation_questions_as_validation_did(trained, tiny_musique, tmp_path):
    cfg, ckpt = trained
    validation = validation_rankings(cfg, ckpt)
    evaluated = eval_rankings(ckpt, tiny_musique, tmp_path)
    assert len(validation) == 3 and all(len(passages) == 10 for passages, _ in validation.values())
    assert {q: passages for q, (passages, _) in evaluated.items()} == {q: p for q, (p, _) in validation.items()}
    for question, (_, scores) in validation.items():
        assert evaluated[question][1] == pytest.approx(scores, rel=1e-6, abs=1e-9), question
