"""Checkpoints and run folders under attack and accident (issue 22, probes 52-60; issue 37, probes 5-7): a checkpoint
naming files outside its run folder, a kill while last.ckpt is written, two runs in one folder, a moved run folder,
a resume with another architecture, a checkpoint with one flipped bit, and a run folder reached through a
symlink or whose lock cannot be opened. Each runs ``run_train`` on musique_tiny
(16 questions) in seconds."""

from __future__ import annotations

import re
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from stand_ins import frozen_demo

from glmrag.io import CheckpointPathError, load_checkpoint_dict
from glmrag.jobs.config_check import ConfigError
from glmrag.jobs.evaluate import run_eval
from glmrag.jobs.run_folder import RunFolderBusy, resume_checkpoint, run_folder_lock
from glmrag.jobs.train import run_train
from glmrag.models.checkpointing import AtomicCheckpointIO, CheckpointMismatchError
from tests.chaos.conftest import compose_config

pytestmark = pytest.mark.chaos

MONITORED = "val/recall@2"


def job(tiny: str, tmp: Path, *extra: str) -> list[str]:
    """A two-epoch GFM-RAG+ demo at learning rate 0 (the validation metric never improves after epoch 0)."""
    return frozen_demo(tiny, tmp, "evaluate=false", "test=false", *extra)


@pytest.fixture(scope="module")
def trained(tiny_musique, glmrag_cache, tmp_path_factory) -> Path:
    """The run folder of one trained demo: ``last.ckpt`` (epoch 1) and the best, ``epoch00-*.ckpt``."""
    tmp = tmp_path_factory.mktemp("trained")
    run_train(compose_config("train", job(tiny_musique, tmp, f"checkpoint_dir={tmp / 'run'}")))
    return tmp / "run"


def copy_run(trained: Path, to: Path) -> Path:
    shutil.copytree(trained, to)
    return to


def monitored_state(ckpt: dict) -> dict:
    (key,) = [k for k in ckpt["callbacks"] if MONITORED in k]
    return ckpt["callbacks"][key]


@pytest.mark.parametrize(
    ("target", "score"),
    [("victim.txt", -1.0), ("victim2.ckpt", 1.0)],  # beaten by the next epoch: deleted; unbeatable: evaluated
)
def test_a_checkpoint_cannot_delete_or_choose_files_outside_its_run_folder(
    target, score, trained, tiny_musique, tmp_path
):
    run = copy_run(trained, tmp_path / "runs" / "run")
    victim = tmp_path / "runs" / target
    shutil.copy(run / "last.ckpt", victim)
    ckpt = torch.load(run / "last.ckpt", weights_only=True)
    outside = f"{run}/../{target}"
    monitored_state(ckpt).update(
        dirpath=str(run),  # Lightning restores the paths only for its own dirpath
        best_model_path=outside,
        kth_best_model_path=outside,
        best_k_models={outside: torch.tensor(score)},
        best_model_score=torch.tensor(score),
        kth_value=torch.tensor(score),
    )
    torch.save(ckpt, run / "last.ckpt")
    out = run_train(
        compose_config("train", job(tiny_musique, tmp_path, "trainer.max_epochs=3", f"ckpt_path={run / 'last.ckpt'}"))
    )
    assert victim.is_file()  # Lightning deleted victim.txt
    assert Path(out["best_checkpoint"]).parent == run  # test, evaluation and the store used victim2.ckpt


def test_a_kill_while_last_ckpt_is_written_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    path = tmp_path / "run" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 1, "w": torch.ones(4)}, path)
    real_save = torch.save

    def killed(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        f.truncate(10)  # half of it on disk, then the kill
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"epoch": 2, "w": torch.zeros(4)}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["epoch"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no temp file left behind


def test_every_trainer_writes_checkpoints_atomically():
    import hydra

    for trainer in ("default", "cpu", "ddp_cpu"):
        cfg = compose_config("train", ["experiment=demo", f"trainer={trainer}", "output_dir=x"])
        built = hydra.utils.instantiate(cfg.trainer, logger=False, enable_checkpointing=False)
        assert isinstance(built.strategy.checkpoint_io, AtomicCheckpointIO), trainer


def test_a_truncated_last_ckpt_is_named_and_skipped_by_ckpt_path_last(trained, tiny_musique, tmp_path):
    run = copy_run(trained, tmp_path / "run")
    older = run / "hpc_ckpt_1.ckpt"
    shutil.copy(run / "last.ckpt", older)
    (run / "last.ckpt").write_bytes(b"")  # what a kill during Lightning's cross-filesystem copy left
    assert resume_checkpoint(run) == str(older)  # the newest whole one
    with pytest.raises(ConfigError, match=r"last\.ckpt: the file is truncated"):
        run_train(compose_config("train", job(tiny_musique, tmp_path, f"ckpt_path={run / 'last.ckpt'}")))


def test_a_second_run_in_a_live_run_folder_is_refused(tiny_musique, tmp_path):
    cfg = compose_config("train", job(tiny_musique, tmp_path, f"checkpoint_dir={tmp_path / 'shared'}"))
    with run_folder_lock(cfg):  # the first run, still going
        with pytest.raises(RunFolderBusy, match=r"shared belongs to a run that is still going"):
            run_train(cfg)
    with run_folder_lock(cfg):  # released when the first run ended
        pass


def test_a_symlink_to_a_live_run_folder_is_refused_too(tiny_musique, tmp_path):
    (tmp_path / "x" / "run").mkdir(parents=True)
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "link").symlink_to(tmp_path / "x" / "run")
    first = compose_config("train", job(tiny_musique, tmp_path, f"checkpoint_dir={tmp_path / 'x' / 'run'}"))
    second = compose_config("train", job(tiny_musique, tmp_path, f"checkpoint_dir={tmp_path / 'y' / 'link'}"))
    with run_folder_lock(first):  # one real folder, one lock: both spellings take x/.run.lock
        with pytest.raises(RunFolderBusy, match=r"belongs to a run that is still going"):
            run_train(second)
    assert not (tmp_path / "y" / ".link.lock").exists()


def test_a_run_folder_whose_lock_cannot_be_opened_is_refused(tiny_musique, tmp_path):
    (tmp_path / ".shared.lock").mkdir()  # the lock's name taken by a folder: os.open fails
    cfg = compose_config("train", job(tiny_musique, tmp_path, f"checkpoint_dir={tmp_path / 'shared'}"))
    with pytest.raises(RunFolderBusy, match=r"\.shared\.lock cannot be opened"):
        run_train(cfg)
    assert not list(tmp_path.rglob("*.ckpt"))


def test_a_moved_run_folder_keeps_its_best_score(trained, tiny_musique, tmp_path):
    moved = copy_run(trained, tmp_path / "elsewhere")
    (best,) = moved.glob("epoch*.ckpt")
    overrides = job(tiny_musique, tmp_path, "trainer.max_epochs=3", f"ckpt_path={moved / 'last.ckpt'}")
    out = run_train(compose_config("train", overrides))
    assert Path(out["best_checkpoint"]) == best  # epoch 2 is no better (lr 0): Lightning made it the best
    assert torch.load(moved / "last.ckpt", weights_only=True)["epoch"] == 2


def test_a_resume_with_another_architecture_names_the_difference(trained, tiny_musique, tmp_path):
    run = copy_run(trained, tmp_path / "run")
    overrides = job(tiny_musique, tmp_path, "model.gnn.hidden_channels=16", f"ckpt_path={run / 'last.ckpt'}")
    with pytest.raises(CheckpointMismatchError, match=r"hidden_channels: 8 in the checkpoint, 16 here"):
        run_train(compose_config("train", overrides))


def flip_a_bit(source: Path, target: Path) -> str:
    """``source`` copied to ``target`` with one bit flipped in its largest tensor; returns that zip member's name."""
    with zipfile.ZipFile(source) as archive:
        member = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    blob = bytearray(source.read_bytes())
    name_len, extra_len = struct.unpack("<HH", blob[member.header_offset + 26 : member.header_offset + 30])
    start = member.header_offset + 30 + name_len + extra_len  # the member's bytes (torch stores, never deflates)
    blob[start + member.file_size // 2] ^= 0x40  # an exponent bit of a float32: a weight becomes huge
    target.write_bytes(bytes(blob))
    return member.filename


def test_a_checkpoint_with_one_flipped_bit_is_refused_wherever_it_is_read(trained, tiny_musique, tmp_path):
    (best,) = trained.glob("epoch*.ckpt")
    member = flip_a_bit(best, tmp_path / "flipped.ckpt")
    assert torch.load(tmp_path / "flipped.ckpt", weights_only=True)  # torch itself loads it without a word
    named = rf"flipped\.ckpt: corrupted: its member '{re.escape(member)}' fails its CRC-32 check"
    with pytest.raises(CheckpointPathError, match=named):  # the Python API's and the checkpoint retriever's loader
        load_checkpoint_dict(tmp_path / "flipped.ckpt")
    evaluate = ["retriever=[checkpoint,dense]", f"ckpt_path={tmp_path / 'flipped.ckpt'}", "data=musique100"]
    evaluate += [f"data.name={tiny_musique}", f"output_dir={tmp_path / 'eval'}", f"results_dir={tmp_path / 'r'}"]
    with pytest.raises(ConfigError, match=named):
        run_eval(compose_config("eval", evaluate))
    for key in ("ckpt_path", "model.init_from"):  # a resume, and weights copied into a new run
        with pytest.raises(ConfigError, match=rf"{key}=.*{named}"):
            run_train(compose_config("train", job(tiny_musique, tmp_path, f"{key}={tmp_path / 'flipped.ckpt'}")))
    assert not (tmp_path / "eval").exists()


def edited(best: Path, target: Path, edit) -> Path:
    """``best`` saved again as ``target`` after ``edit(checkpoint dict)``: a file changed by hand."""
    ckpt = torch.load(best, weights_only=True)
    edit(ckpt)
    torch.save(ckpt, target)
    return target


@pytest.mark.parametrize(
    "edit",
    [
        lambda c: c["hyper_parameters"].pop("gnn"),
        lambda c: c["hyper_parameters"]["gnn"].update(hidden_channels=16),
        lambda c: c.update(hyper_parameters=None),
    ],
    ids=["node removed", "size changed", "hyper_parameters=None"],
)
def test_hand_edited_hyper_parameters_are_named_not_torchs_key_list(trained, tmp_path, edit):
    """Probe (issue 50): these gave torch's 'Missing key(s)' / 'size mismatch' lists without the file or fix."""
    from glmrag.models.gnn_module import GNNRetrieverModule

    (best,) = trained.glob("epoch*.ckpt")
    path = edited(best, tmp_path / "edited.ckpt", edit)
    with pytest.raises(CheckpointMismatchError, match=rf"checkpoint {path}: its hyper-parameters do not build"):
        GNNRetrieverModule.load_from_checkpoint(path, weights_only=True)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda c: c.update(model=c.pop("state_dict")), r"holds GFM-RAG's layout \({'model': state_dict}"),
        (lambda c: c.update(state_dict={k: v for k, v in c["state_dict"].items() if not k.startswith("gnn.")}),
         r"holds no GNN weights \(no 'gnn.' keys\)"),
        (lambda c: None, r"holds another GNN than model.gnn \(16 channels, 1 layers\): gnn.* has shape"),
    ],
    ids=["GFM-RAG layout", "no gnn keys", "other sizes"],
)  # fmt: skip
def test_init_from_a_file_it_cannot_use_names_the_file_and_the_fix(trained, tiny_musique, tmp_path, edit, says):
    """Probe (issue 50): model.init_from with these gave KeyError: 'state_dict' or torch's key lists, after the
    index build; the training job's config check now refuses them first."""
    from glmrag.jobs.config_check import validate_train_config
    from glmrag.models.gnn_module import GNNRetrieverModule

    (best,) = trained.glob("epoch*.ckpt")
    path = edited(best, tmp_path / "init.ckpt", edit)
    saved = torch.load(best, weights_only=True)["hyper_parameters"]
    module = GNNRetrieverModule(**{**saved, "gnn": {**saved["gnn"], "hidden_channels": 16}})
    with pytest.raises(CheckpointMismatchError, match=rf"model.init_from={path} {says}"):
        module.load_gnn_weights(str(path))
    overrides = job(tiny_musique, tmp_path, "model.gnn.hidden_channels=16", f"model.init_from={path}")
    with pytest.raises(CheckpointMismatchError, match=rf"model.init_from={path} {says}"):
        validate_train_config(compose_config("train", overrides))
