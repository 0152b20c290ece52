"""CheckpointRetriever: a trained GNN checkpoint ranks like the module validates."""

from __future__ import annotations

from functools import partial

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import OmegaConf

from glmrag.data.registry import load_dataset
from glmrag.datamodules.gnn_datamodule import KGQADataModule
from glmrag.eval.evaluator import evaluate
from glmrag.index.cache import get_index
from glmrag.models.gnn_module import GNNRetrieverModule
from glmrag.retrievers.base import Retriever
from glmrag.retrievers.checkpoint import CheckpointRetriever

VAL_LIMIT = 12

pytestmark = [
    pytest.mark.usefixtures("glmrag_cache"),  # GLMRAG_CACHE_DIR set for the whole module
    pytest.mark.integration,  # trains on musique100: its full index with entity embeddings takes minutes
]


@pytest.fixture(scope="module")
def trained(index_config, tmp_path_factory):
    """A tiny GNN trained one epoch on 12 musique100 questions; its checkpoint and validation metrics."""
    L.seed_everything(0)
    root = tmp_path_factory.mktemp("ckpt")
    dm = KGQADataModule("musique100", index=index_config(), limit=VAL_LIMIT, batch_size=4)
    fast = partial(torch.optim.AdamW, lr=5e-3)
    model = GNNRetrieverModule(gnn={"hidden_channels": 16, "num_layers": 2}, optimizer=fast, kgs=dm)
    checkpoint = ModelCheckpoint(dirpath=root, save_last=True)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        callbacks=[checkpoint],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )
    trainer.fit(model, datamodule=dm)
    metrics = trainer.validate(model, datamodule=dm, verbose=False)[0]
    return checkpoint.last_model_path, metrics


@pytest.fixture(scope="module")
def musique(index_config):
    full = load_dataset("musique100")
    index = get_index(full, OmegaConf.create(index_config()))
    questions = list(load_dataset("musique100", "validation", limit=VAL_LIMIT).qa)
    return index, full.corpus, questions


def test_validation_metrics_equal_the_evaluators(trained, musique):
    """val/recall@k of the module = the evaluator's mean over the same questions."""
    ckpt, metrics = trained
    index, corpus, questions = musique
    rankings = CheckpointRetriever(ckpt).retrieve(questions, index, corpus, top_k=10)
    result = evaluate({"checkpoint": rankings}, questions, index, ks=(1, 2, 5, 10), n_boot=10)
    for name in ("recall@1", "recall@2", "recall@5", "recall@10", "mrr"):
        assert result.overall["checkpoint"][name].mean == pytest.approx(metrics[f"val/{name}"], abs=1e-6), name
    assert metrics["val/recall@2"] > 0  # a trained model, not a vacuous match


def test_rankings_are_valid_for_every_question(trained, musique):
    ckpt, _ = trained
    index, corpus, questions = musique
    retriever = CheckpointRetriever(ckpt, top_entities=15, batch_size=5)
    assert isinstance(retriever, Retriever) and retriever.name == "checkpoint"
    rankings = retriever.retrieve(questions, index, corpus, top_k=7)
    assert [r.question_id for r in rankings] == [q.id for q in questions]
    for r in rankings:
        assert len(r.passage_ids) == len(set(r.passage_ids)) == 7
        assert set(r.passage_ids) <= set(corpus.ids)
        assert np.all(np.diff(r.passage_scores) <= 0)
        assert len(r.entity_ids) == len(r.entity_scores) == 15
        assert all(0 <= e < index.num_entities for e in r.entity_ids)
        assert np.all(np.diff(r.entity_scores) <= 0)
    # batching does not change the rankings
    one_by_one = CheckpointRetriever(ckpt, top_entities=15, batch_size=1).retrieve(questions, index, corpus, top_k=7)
    for single, batched in zip(one_by_one, rankings, strict=True):
        assert single.passage_ids == batched.passage_ids and single.entity_ids == batched.entity_ids
        assert np.allclose(single.entity_scores, batched.entity_scores, atol=1e-5)
