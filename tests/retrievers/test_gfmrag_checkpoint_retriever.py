"""GFMRAGCheckpointRetriever: a GFM-RAG checkpoint folder ranks in the shared evaluator with GFM-RAG's entity
scores (issue 51, item 2); its encoder and folder are checked, and a bad folder stops eval.py with the file named.

The expected scores are GFM-RAG's own (``tests/gfmrag_folders.py``, from ``benchmarks/gfmrag_side_by_side.py``);
the sentence encoder is a stand-in that returns the reference's features for the texts GFM-RAG embeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from gfmrag_folders import (
    ENCODER,
    FEAT,
    GFMRAG_SCORES,
    ReferenceEncoder,
    corpus,
    edited_config,
    questions,
    reference_index,
    seeded_state_dict,
    upstream_shapes,
    write_folder,
)
from omegaconf import OmegaConf

from glmrag.index.embed import DEFAULT_MODEL, Embedder
from glmrag.io import CheckpointPathError
from glmrag.jobs.cli import reported_errors
from glmrag.jobs.config_check import check_gfmrag_folders
from glmrag.models.checkpointing import CheckpointMismatchError
from glmrag.retrievers import gfmrag_checkpoint
from glmrag.retrievers.base import Retriever
from glmrag.retrievers.gfmrag_checkpoint import GFMRAGCheckpointRetriever, check_encoder

TARGET = "glmrag.retrievers.gfmrag_checkpoint.GFMRAGCheckpointRetriever"


class Normalize:
    """Named as sentence-transformers' last module of a normalising encoder."""


@pytest.fixture
def encoders(monkeypatch):
    """The encoder names the retriever asked for; each gets the reference's features."""
    asked = []

    def make(name: str) -> ReferenceEncoder:
        asked.append(name)
        return ReferenceEncoder(name, [Normalize()])

    monkeypatch.setattr(gfmrag_checkpoint, "Embedder", make)
    return asked


def test_rankings_carry_gfmrags_entity_scores(tmp_path, encoders):
    folder = write_folder(tmp_path / "f")
    retriever = GFMRAGCheckpointRetriever(str(folder), top_entities=6, cache_dir=str(tmp_path / "cache"))
    assert isinstance(retriever, Retriever)
    rankings = retriever.retrieve(questions(), reference_index(), corpus(), top_k=3)
    want = torch.tensor(GFMRAG_SCORES)
    for row, ranking in enumerate(rankings):
        assert ranking.entity_ids == want[row].argsort(descending=True).tolist()
        torch.testing.assert_close(
            torch.tensor(ranking.entity_scores), want[row, ranking.entity_ids], atol=1e-5, rtol=0
        )
        assert len(ranking.passage_ids) == 3
    assert set(encoders) == {ENCODER}  # questions and relations: config.json's encoder
    cached = GFMRAGCheckpointRetriever(str(folder), top_entities=6, cache_dir=str(tmp_path / "cache"))
    again = cached.retrieve(questions(), reference_index(), corpus(), top_k=3)  # the graph from the cache
    assert [r.entity_scores for r in again] == [r.entity_scores for r in rankings]


def test_config_json_ranker_and_overrides_reach_the_module(tmp_path, encoders):
    ranker = {"_target_": "gfmrag.models.gfm_rag_v1.rankers.TopKRanker", "top_k": 3}
    folder = write_folder(tmp_path / "f", edited_config(**{"model_config.ranker": ranker}))
    evaluation = GFMRAGCheckpointRetriever(str(folder)).module.evaluation
    assert (evaluation.ranker, evaluation.top_entities) == ("topk", 3)
    evaluation = GFMRAGCheckpointRetriever(str(folder), ranker="simple", top_entities=4).module.evaluation
    assert (evaluation.ranker, evaluation.top_entities) == ("simple", 4)
    GFMRAGCheckpointRetriever(str(folder), embed_model="offline:all-mpnet-base-v2")
    assert encoders[-1] == "offline:all-mpnet-base-v2"


def test_an_encoder_of_another_size_is_refused(tmp_path):
    folder = write_folder(tmp_path / "f")
    with pytest.raises(ValueError, match=rf"embeds 384-d vectors but .* reads {FEAT}-d"):
        GFMRAGCheckpointRetriever(str(folder), embed_model=DEFAULT_MODEL)  # the offline MiniLM, 384-d


def test_normalize_false_needs_an_encoder_that_normalises(tmp_path):
    """GFM-RAG embeds raw encoder output (normalize: false); glmrag's Embedder gives unit rows, the same vectors
    only when the encoder's last module normalises (all-mpnet-base-v2's does)."""
    config_file = tmp_path / "config.json"
    check_encoder(ReferenceEncoder(modules=[Normalize()]), FEAT, False, config_file)
    check_encoder(ReferenceEncoder(modules=[object()]), FEAT, True, config_file)
    with pytest.raises(ValueError, match="normalize: false"):
        check_encoder(ReferenceEncoder(modules=[object()]), FEAT, False, config_file)
    check_encoder(Embedder(DEFAULT_MODEL), 384, False, config_file)  # MiniLM ends in Normalize


def test_eval_config_check_reads_the_folder_before_any_work(tmp_path):
    node = {"_target_": TARGET, "folder": str(tmp_path / "f"), "ranker": None}
    with pytest.raises(CheckpointPathError, match=r"retriever\.gfm\.folder=.*no such folder"):
        check_gfmrag_folders(OmegaConf.create({"gfm": node}))
    write_folder(tmp_path / "f", edited_config(**{"model_config.ranker": {"_target_": "x.IDFWeightedRanker"}}))
    with pytest.raises(CheckpointMismatchError, match=r"set retriever\.gfm\.ranker=idf_topk"):
        check_gfmrag_folders(OmegaConf.create({"gfm": node}))
    check_gfmrag_folders(OmegaConf.create({"gfm": {**node, "ranker": "idf_topk"}}))


def test_a_bad_folder_ends_the_job_with_its_message_not_a_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    folder = write_folder(tmp_path / "f")
    (folder / "config.json").unlink()
    with pytest.raises(SystemExit) as stop, reported_errors("eval.py"):
        GFMRAGCheckpointRetriever(str(folder))
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert f"{folder / 'config.json'} is missing" in err and "Traceback" not in err


@pytest.mark.slow  # builds the toy index and loads the offline MiniLM: about 10 s
def test_eval_py_runs_a_gfmrag_folder(tmp_path, monkeypatch):
    """``python eval.py retriever=gfmrag_checkpoint retriever.gfmrag_checkpoint.folder=<folder>`` on the toy set,
    the folder's encoder the offline MiniLM (384-d), as docs/evaluation.md runs GFM-RAG-8M."""
    from hydra import compose, initialize_config_dir

    from glmrag.jobs.evaluate import run_eval

    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))
    config = edited_config(
        **{
            "text_emb_model_config.text_emb_model_name": DEFAULT_MODEL,
            "model_config.feat_dim": 384,
            "model_config.entity_model.hidden_dims": [FEAT] * 2,
        }
    )
    folder = write_folder(tmp_path / "f", config, seeded_state_dict(upstream_shapes(feat=384, hidden=FEAT, layers=2)))
    overrides = ["data=toy", "retriever=gfmrag_checkpoint", f"retriever.gfmrag_checkpoint.folder={folder}"]
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[2] / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=[*overrides, f"output_dir={tmp_path / 'out'}", "n_boot=50"])
    result = run_eval(cfg)
    assert result.systems == ["gfmrag_checkpoint"]
    assert result.overall["gfmrag_checkpoint"]["recall@5"].mean == pytest.approx(1.0)  # 3 passages: any ranking
    (line,) = (tmp_path / "out" / "rankings.jsonl").read_text().splitlines()
    assert json.loads(line)["system"] == "gfmrag_checkpoint" and len(json.loads(line)["passage_ids"]) == 3
