"""A checkpoint records the module class that saved it, and the checkpoint retriever loads that class; a checkpoint
that records none, or names anything but a glmrag module class, is refused by file name with the fix."""

from __future__ import annotations

import sys

import lightning
import pytest
import torch

from glmrag.index.embed import DEFAULT_MODEL
from glmrag.models.checkpointing import CheckpointLayoutError
from glmrag.models.glm_module import GLMRetrieverModule
from glmrag.models.gnn_module import GNNRetrieverModule
from glmrag.models.retriever_module import MODULE_CLASS_KEY
from glmrag.retrievers.checkpoint import CheckpointRetriever

T5_TINY = {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_heads": 2, "d_kv": 8}


def tiny(family: str):
    if family == "gnn":
        return GNNRetrieverModule(gnn={"hidden_channels": 8, "num_layers": 1})
    return GLMRetrieverModule(glm={"encoder_config": T5_TINY, "tokenizer": DEFAULT_MODEL})


def save(module, path, **entries):
    """``module`` saved at ``path`` as a Lightning checkpoint with its own entries, then ``entries`` (None: removed)."""
    checkpoint = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "pytorch-lightning_version": lightning.__version__,
    }
    module.on_save_checkpoint(checkpoint)
    for key, value in entries.items():
        if value is None:
            checkpoint.pop(key)
        else:
            checkpoint[key] = value
    torch.save(checkpoint, path)
    return path


@pytest.mark.parametrize("family", ["gnn", "glm"])
def test_the_retriever_loads_the_class_that_saved_the_checkpoint(tmp_path, family):
    module = tiny(family)
    retriever = CheckpointRetriever(str(save(module, tmp_path / f"{family}.ckpt")))
    assert type(retriever.module) is type(module)
    assert retriever.module.hparams == module.hparams


@pytest.mark.parametrize(
    ("recorded", "message"),
    [
        (None, "records no module class"),
        ("antigravity.fly", "names the module class 'antigravity.fly'"),  # importing antigravity opens a browser
        ("glmrag.models.gnn_module.KGCSettings", "names the module class 'glmrag.models.gnn_module.KGCSettings'"),
    ],
)
def test_a_checkpoint_without_a_module_class_is_refused_by_name(tmp_path, recorded, message):
    path = save(tiny("gnn"), tmp_path / "old.ckpt", **{MODULE_CLASS_KEY: recorded})
    with pytest.raises(CheckpointLayoutError, match=rf"old.ckpt {message}.*{MODULE_CLASS_KEY}.*train the model again"):
        CheckpointRetriever(str(path))
    assert "antigravity" not in sys.modules
