"""GLMRetrieverModule on the MPNet backbone (a tiny random MPNet, musique100): it learns, checkpoints round-trip,
the backbone is read from a saved model's config, and checkpoints from before the backbone setting still load."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch
from test_glm_module import MAX_TRIPLETS, T5_TINY, fit_on_training_questions
from transformers import MPNetConfig, MPNetModel, T5Config, T5EncoderModel

from glmrag.index.embed import DEFAULT_MODEL
from glmrag.models.glm_module import GLMConfig, GLMRetrieverModule, glm_encoder
from glmrag.nn.glm import T5GLMEncoder
from glmrag.nn.glm_mpnet import MPNetGLMEncoder
from glmrag.nn.glm_retriever import GLMInputs

MPNET_TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}

pytestmark = pytest.mark.usefixtures("glmrag_cache")


def make_model(kgs=None, **glm) -> GLMRetrieverModule:
    torch.manual_seed(0)
    return GLMRetrieverModule(
        glm={"backbone": "mpnet", "encoder_config": MPNET_TINY, "tokenizer": DEFAULT_MODEL, **glm},
        subgraph={"max_triplets": MAX_TRIPLETS},
        lr={"head": 3e-3, "backbone": 3e-3},
        optimizer=partial(torch.optim.AdamW),
        kgs=kgs,
    )


@pytest.fixture(scope="module")
def fitted(index_config, cpu_trainer, tmp_path_factory):
    """As test_glm_module's: validate on the training questions, train 5 epochs, validate again."""
    cache = tmp_path_factory.mktemp("subgraphs")
    return fit_on_training_questions(make_model, index_config, cpu_trainer, cache, tmp_path_factory)


@pytest.mark.integration  # trains an MPNet GLM on musique100
def test_the_mpnet_glm_fits_its_training_questions(fitted):
    assert isinstance(fitted.model.net.encoder, MPNetGLMEncoder)
    assert fitted.after["val/loss"] < fitted.before["val/loss"] - 0.2
    assert fitted.after["val/recall@2"] >= fitted.before["val/recall@2"] + 0.1


@pytest.mark.integration  # trains an MPNet GLM on musique100
def test_load_from_checkpoint_gives_the_same_logits(fitted, tmp_path):
    path = tmp_path / "glm.ckpt"
    fitted.trainer.save_checkpoint(path)
    loaded = GLMRetrieverModule.load_from_checkpoint(path).eval()
    assert loaded.hparams.glm["backbone"] == "mpnet" and isinstance(loaded.net.encoder, MPNetGLMEncoder)
    inputs = GLMInputs.from_batch(next(iter(fitted.dm.val_dataloader())))
    with torch.no_grad():
        torch.testing.assert_close(loaded(inputs), fitted.model.eval()(inputs))


def test_a_checkpoint_from_before_the_backbone_setting_loads_as_t5(tmp_path):
    """Checkpoints saved before backbone / absolute_positions / frozen_layers existed: a T5, nothing frozen."""
    torch.manual_seed(0)
    model = GLMRetrieverModule(glm={"encoder_config": T5_TINY, "tokenizer": DEFAULT_MODEL})
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(model)
    path = tmp_path / "old.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=False)
    for key in ("backbone", "absolute_positions", "frozen_layers"):
        del checkpoint["hyper_parameters"]["glm"][key]
    torch.save(checkpoint, path)
    loaded = GLMRetrieverModule.load_from_checkpoint(path)
    assert isinstance(loaded.net.encoder, T5GLMEncoder) and loaded.net.encoder.frozen_layers == 0
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor)


def test_the_backbone_is_read_from_a_saved_models_config(tmp_path):
    MPNetModel(MPNetConfig(vocab_size=100, **MPNET_TINY), add_pooling_layer=False).save_pretrained(tmp_path / "mpnet")
    T5EncoderModel(T5Config(vocab_size=100, **T5_TINY)).save_pretrained(tmp_path / "t5")
    assert isinstance(glm_encoder(GLMConfig(encoder=str(tmp_path / "mpnet"))), MPNetGLMEncoder)
    assert isinstance(glm_encoder(GLMConfig(encoder=str(tmp_path / "t5"))), T5GLMEncoder)
    encoder = glm_encoder(GLMConfig(encoder=str(tmp_path / "mpnet"), frozen_layers=1))
    assert encoder.training and not encoder.mpnet.encoder.layer[0].training  # from_pretrained's eval mode undone
    assert not any(p.requires_grad for p in encoder.mpnet.encoder.layer[0].parameters())


def test_settings_that_do_not_fit_the_backbone_are_refused():
    with pytest.raises(ValueError, match=r"\['d_model'\], which are not MPNetConfig fields"):
        glm_encoder(GLMConfig(backbone="mpnet", encoder_config={"d_model": 16}, tokenizer=DEFAULT_MODEL))
    with pytest.raises(ValueError, match="absolute_positions is MPNet's"):
        glm_encoder(GLMConfig(encoder_config=T5_TINY, tokenizer=DEFAULT_MODEL, absolute_positions="constant"))
    with pytest.raises(ValueError, match="glm.backbone must be one of"):
        GLMConfig(backbone="bert")
    with pytest.raises(ValueError, match="frozen_layers must be in"):
        glm_encoder(GLMConfig(backbone="mpnet", encoder_config=MPNET_TINY, tokenizer=DEFAULT_MODEL, frozen_layers=2))
