"""A GFM-RAG checkpoint folder is read as its config.json says, starts a GNN run (``model.init_from``), and a bad
one is refused with the file, the setting and the fix (issue 51, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from gfmrag_folders import CONFIG, ENCODER, FEAT, HIDDEN, LAYERS, RELEASE_2025_02, edited_config, write_folder
from omegaconf import OmegaConf

from glmrag.io import CheckpointPathError
from glmrag.jobs.config_check import check_init_from
from glmrag.models.checkpointing import CheckpointMismatchError
from glmrag.models.gfmrag_folder import read_gfmrag_folder
from glmrag.models.gnn_module import GNNRetrieverModule
from glmrag.nn.gfmrag_weights import from_gfmrag_state_dict

SIZES = {"hidden_channels": HIDDEN, "num_layers": LAYERS, "question_dim": FEAT, "relation_dim": FEAT}


def test_the_folder_gives_sizes_encoder_ranker_and_weights(tmp_path):
    folder = write_folder(tmp_path / "f")
    checkpoint = read_gfmrag_folder(folder)
    gnn = checkpoint.gnn
    assert (gnn.hidden_channels, gnn.num_layers, gnn.question_dim, gnn.relation_dim) == (HIDDEN, LAYERS, FEAT, FEAT)
    assert not gnn.use_node_features
    assert (checkpoint.encoder, checkpoint.normalize) == (ENCODER, False)
    assert (checkpoint.ranker, checkpoint.top_entities) == ("idf_topk", 5)  # IDFWeightedTopKRanker, top_k 5
    upstream = torch.load(folder / "model.pth", weights_only=True)["model"]
    assert checkpoint.state_dict.keys() == from_gfmrag_state_dict(upstream).keys()
    assert torch.equal(
        checkpoint.state_dict["convs.1.norm.weight"], upstream["entity_model.layers.1.layer_norm.weight"]
    )


@pytest.mark.parametrize(
    ("ranker", "want"),
    [
        ({"_target_": "gfmrag.models.gfm_rag_v1.rankers.TopKRanker", "top_k": 3}, ("topk", 3)),
        ({"_target_": "gfmrag.models.gfm_rag_v1.rankers.SimpleRanker"}, ("simple", 20)),
    ],
)
def test_config_json_ranker_is_honoured(tmp_path, ranker, want):
    checkpoint = read_gfmrag_folder(write_folder(tmp_path / "f", edited_config(**{"model_config.ranker": ranker})))
    assert (checkpoint.ranker, checkpoint.top_entities) == want


def test_a_ranker_glmrag_lacks_must_be_chosen(tmp_path):
    """GFM-RAG's IDFWeightedRanker (IDF-weighted scores of all entities) is not glmrag's: the folder reads (its
    weights can start a run) but ranking needs a ranker chosen."""
    config = edited_config(
        **{"model_config.ranker": {"_target_": "gfmrag.models.gfm_rag_v1.rankers.IDFWeightedRanker"}}
    )
    checkpoint = read_gfmrag_folder(write_folder(tmp_path / "f", config))
    with pytest.raises(CheckpointMismatchError, match=r"config\.json: model_config\.ranker.*set ranker=idf_topk"):
        checkpoint.document_ranker()
    assert checkpoint.document_ranker("topk") == "topk"


def test_the_2025_02_layout_reads_with_gfmrags_default_ranker(tmp_path):
    """``rel_emb_dim``, no ``dataset_config``, no ranker (GFM-RAG's stage config: idf_topk over 20 entities)."""
    checkpoint = read_gfmrag_folder(write_folder(tmp_path / "f", RELEASE_2025_02))
    assert (checkpoint.gnn.relation_dim, checkpoint.ranker, checkpoint.top_entities) == (FEAT, "idf_topk", 20)


def test_missing_files_name_the_file_and_the_download(tmp_path):
    folder = write_folder(tmp_path / "f")
    (folder / "config.json").unlink()
    with pytest.raises(CheckpointPathError, match=r"config\.json is missing.*huggingface-cli download"):
        read_gfmrag_folder(folder)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.pth").unlink()
    with pytest.raises(CheckpointPathError, match=r"model\.pth is missing"):
        read_gfmrag_folder(folder)
    with pytest.raises(CheckpointPathError, match="no such folder"):
        read_gfmrag_folder(tmp_path / "absent")


@pytest.mark.parametrize(
    ("edit", "names"),
    [
        ({"model_config._target_": "gfmrag.models.gfm_reasoner.GraphReasoner"}, "model_config._target_"),
        ({"model_config.entity_model.aggregate_func": "pna"}, "aggregate_func"),
        ({"model_config.entity_model.short_cut": False}, "short_cut"),
        ({"dataset_config.inverse_relation_feat": "inverse"}, "dataset_config.inverse_relation_feat"),
        ({"dataset_config.use_node_feat": True}, "dataset_config.use_node_feat"),
        ({"text_emb_model_config.query_instruct": "query: "}, "text_emb_model_config.query_instruct"),
        ({"text_emb_model_config._target_": "gfmrag.text_emb_models.NVEmbedV2"}, "text_emb_model_config._target_"),
        ({"model_config.init_nodes_weight": False}, "init_nodes_weight"),
        ({"model_config.feat_dim": 16}, "model_config.feat_dim is 16"),
        ({"model_config.entity_model.hidden_dims": [HIDDEN] * 2}, "hidden_dims"),
    ],
)
def test_settings_glmrag_cannot_honour_are_refused_in_config_json(tmp_path, edit, names):
    folder = write_folder(tmp_path / "f", edited_config(**edit))
    with pytest.raises(CheckpointMismatchError, match=rf"config\.json.*{names}"):
        read_gfmrag_folder(folder)


def test_weights_of_another_layout_name_model_pth(tmp_path):
    folder = write_folder(tmp_path / "f")
    torch.save({"state_dict": {}}, folder / "model.pth")  # a Lightning checkpoint renamed
    with pytest.raises(CheckpointMismatchError, match=r"model\.pth holds the keys \['state_dict'\]"):
        read_gfmrag_folder(folder)
    write_folder(folder)
    state = torch.load(folder / "model.pth", weights_only=True)["model"]
    state.pop("rel_mlp.bias")
    torch.save({"model": state}, folder / "model.pth")
    with pytest.raises(CheckpointMismatchError, match=r"model\.pth.*'rel_mlp\.bias'"):
        read_gfmrag_folder(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointMismatchError, match=r"config\.json is not JSON"):
        read_gfmrag_folder(folder)


def test_init_from_a_folder_loads_its_weights(tmp_path):
    folder = write_folder(tmp_path / "f")
    module = GNNRetrieverModule(gnn=SIZES, init_from=str(folder))
    module.load_gnn_weights(str(folder))
    for name, value in read_gfmrag_folder(folder).state_dict.items():
        assert torch.equal(module.gnn.state_dict()[name], value), name


def test_init_from_a_folder_of_other_sizes_names_the_settings(tmp_path):
    folder = write_folder(tmp_path / "f")
    module = GNNRetrieverModule(gnn={**SIZES, "hidden_channels": 16})
    with pytest.raises(CheckpointMismatchError, match=rf"model.init_from={folder}.*model.gnn.hidden_channels={HIDDEN}"):
        module.load_gnn_weights(str(folder))


def test_the_training_config_check_reads_the_folder_first(tmp_path):
    """``model.init_from=<folder>`` passes the check before any work; a broken folder is refused there."""
    folder = write_folder(tmp_path / "f")
    model = {"_target_": "glmrag.models.gnn_module.GNNRetrieverModule", "gnn": SIZES}
    check_init_from(OmegaConf.create({"model": model}), str(folder))
    (folder / "config.json").unlink()
    with pytest.raises(CheckpointPathError, match=r"model.init_from=.*config\.json is missing"):
        check_init_from(OmegaConf.create({"model": model}), str(folder))
    torch.save({"model": torch.load(folder / "model.pth", weights_only=True)["model"]}, tmp_path / "model.pth")
    with pytest.raises(CheckpointMismatchError, match=r"holds GFM-RAG's layout .* model.init_from=<folder>"):
        check_init_from(OmegaConf.create({"model": model}), str(tmp_path / "model.pth"))


def test_init_from_beside_a_pretrain_stage_is_refused(tmp_path):
    """experiment=gfm_rag's KG-completion stage would start the fine-tuning in place of model.init_from."""
    from hydra import compose, initialize_config_dir

    from glmrag.jobs.config_check import ConfigError, validate_train_config

    folder = write_folder(tmp_path / "f")
    configs = str(Path(__file__).resolve().parents[2] / "configs")
    with initialize_config_dir(config_dir=configs, version_base="1.3"):
        cfg = compose("train", [f"output_dir={tmp_path / 'out'}", "experiment=gfm_rag", f"model.init_from={folder}"])
    with pytest.raises(ConfigError, match=r"a pretrain stage.* add pretrain=null"):
        validate_train_config(cfg)
