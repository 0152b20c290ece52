"""Command-line overrides that change what a run measures change its name (and so its folders); ``ckpt_path=last``
finds a run renamed by a longer training."""

import os
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

import glmrag.jobs.config_path  # noqa: F401  (registers the resolver, as train.py's import of glmrag does)
from glmrag.jobs.config_path import MAX_SUFFIX, run_suffix
from glmrag.jobs.run_folder import resume_folder

ROOT = Path(__file__).resolve().parents[1]


def run_name(config: str, overrides: list[str]) -> str:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name=config, overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # what @hydra.main does before it names the run folder
    try:
        return cfg.run_name
    finally:
        HydraConfig.instance().cfg = None


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        (["experiment=demo"], "gfm_rag_plus_demo-musique100"),
        (["experiment=demo", "model.gnn.hidden_channels=32"], "gfm_rag_plus_demo-musique100-hidden_channels@32"),
        (
            ["experiment=demo", "data.limit=20", "logger=[csv,wandb]", "output_dir=/tmp/x"],
            "gfm_rag_plus_demo-musique100-limit@20",
        ),
        (["experiment=demo", "trainer=cpu", "study=mine"], "gfm_rag_plus_demo-musique100"),
    ],
)
def test_train_run_names_show_what_differs(overrides, name):
    assert run_name("train", overrides) == name


def test_eval_run_names_and_folder_safe_values():
    assert run_name("eval", ["data=toy", "retriever=[ppr]"]) == "eval-toy-retriever@ppr"
    assert run_suffix(["+model.t5=/models/t5 small", "data.split=test"]) == "-t5@_models_t5_small+split@test"
    assert run_suffix([]) == ""


def test_a_data_file_is_named_by_its_stem():
    """A run on data.questions=/home/me/data/dev.json was named ...questions=_home_me_data_dev.json."""
    assert run_suffix(["data.questions=/home/me/data/dev.json", "data.corpus=corpus.json.xz"]) == (
        "-questions@dev+corpus@corpus"
    )
    assert run_suffix(["data.root=/shared/data", "data.limit=20"]) == "-root@data+limit@20"


def test_long_suffixes_stay_folder_names():
    """A toy capacity study run: every override of its command in the name was a 310-character folder name."""
    overrides = [
        f"capacity_pairs.{c}.encoder_config={{d_model: {w}, d_ff: 32, num_layers: 1}}"
        for c, w in [("s", 16), ("b", 32)]
    ]
    long = run_suffix([*overrides, "+trainer.limit_train_batches=2", "index.embed_model=offline:all-MiniLM-L6-v2"])
    assert len(long) == MAX_SUFFIX and long.startswith("-encoder_config@_d_model_16")
    other = run_suffix([*overrides, "+trainer.limit_train_batches=3", "index.embed_model=offline:all-MiniLM-L6-v2"])
    assert other != long and other[:-8] == long[:-8]  # the same start, another hash
    assert run_suffix(["model.dropout=0.1"]) == "-dropout@0.1"  # short ones unchanged


def test_which_steps_run_does_not_name_a_run():
    """evaluate / test / quiet choose which steps of a job run, not what a model measures: the same model
    trained with evaluate=false is the same run (benchmarks/train_2wiki_cpu.sh evaluates separately)."""
    assert run_suffix(["evaluate=false", "test=false", "quiet=true", "trainer.max_epochs=2"]) == "-max_epochs@2"


def _resume_config(checkpoints: Path, run_name: str):
    return OmegaConf.create(
        {
            "ckpt_path": "last",
            "model_name": "gnn",
            "data": {"name": "musique100"},
            "run_name": run_name,
            "checkpoint_dir": str(checkpoints / run_name / "2026-12-05_04-00-00"),  # this start's own, empty
        }
    )


def _checkpoint(path: Path, age: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({}, path)  # a whole checkpoint: ckpt_path=last skips truncated ones
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_a_resume_with_more_epochs_finds_the_run_it_extends(tmp_path, caplog):
    """``trainer.max_epochs=8 ckpt_path=last`` names the run ...-max_epochs@8: it must resume the run started
    with max_epochs=4 (or the default), not start afresh in silence; a run with another setting is not it."""
    runs = tmp_path / "checkpoints"
    old = _checkpoint(runs / "gnn-musique100-limit@8+max_epochs@4" / "a" / "last.ckpt", age=200)
    _checkpoint(runs / "gnn-musique100-limit@8+hidden_channels@32" / "b" / "last.ckpt", age=10)  # another model
    _checkpoint(runs / "gnn-musique100-limit@16" / "c" / "last.ckpt", age=10)  # other data
    with caplog.at_level("WARNING"):
        resumed = resume_folder(_resume_config(runs, "gnn-musique100-limit@8+max_epochs@8"))
    assert resumed.ckpt_path == str(old) and resumed.checkpoint_dir == str(old.parent)
    assert "no checkpoint of run gnn-musique100-limit@8+max_epochs@8; resuming" in caplog.text
    default = _checkpoint(runs / "gnn-musique100-limit@8" / "d" / "last.ckpt", age=100)  # default epochs, newer
    assert resume_folder(_resume_config(runs, "gnn-musique100-limit@8+max_epochs@8")).ckpt_path == str(default)
    own = _checkpoint(runs / "gnn-musique100-limit@8+max_epochs@8" / "e" / "last.ckpt", age=300)  # its own name
    assert resume_folder(_resume_config(runs, "gnn-musique100-limit@8+max_epochs@8")).ckpt_path == str(own)


def test_nothing_to_resume_is_said_loudly(tmp_path, caplog):
    runs = tmp_path / "checkpoints"
    _checkpoint(runs / "gnn-musique100-limit@8+hidden_channels@32" / "b" / "last.ckpt", age=10)
    with caplog.at_level("WARNING"):
        fresh = resume_folder(_resume_config(runs, "gnn-musique100-limit@8+max_epochs@8"))
    assert fresh.ckpt_path is None
    (record,) = [r for r in caplog.records if "NOTHING TO RESUME" in r.getMessage()]
    assert record.levelname == "WARNING" and "gnn-musique100-limit@8+max_epochs@8" in record.getMessage()


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=glm_demo", "trainer.max_epochs=2"],
        ["experiment=demo", "model.optimizer.lr=1e-3", "data.limit=8", "model.evaluation.ks=[1,2,5]"],
        ["experiment=demo", "model.gnn.dropout=0.1", "+model.note=a:b", "seed=3"],
    ],
)
def test_a_printed_checkpoint_path_goes_back_into_the_command_line(overrides, tmp_path):
    """``ckpt_path=checkpoints/<run name>/<time>/<file>``, pasted unquoted, is read back as that path: a name
    holding ``=`` or ``,`` was a Hydra parse error (``mismatched input '='``) that named no key."""
    path = f"checkpoints/{run_name('train', overrides)}/2026-12-06_23-00-00/epoch01-recall2_0.2417.ckpt"
    for key in ("ckpt_path", "model.init_from", "results_dir"):
        (parsed,) = OverridesParser.create().parse_overrides([f"{key}={path}"])
        assert parsed.value() == path, key


def _entry(entry, args: list[str], monkeypatch) -> None:
    """Run a console script's entry point in this process, as ``python <script> <args>`` runs it."""
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.setattr("sys.argv", ["train.py", *args])
    try:
        entry()
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.integration  # three jobs on musique_tiny through the console scripts, in this process (20 s)
def test_a_run_with_overrides_is_evaluated_and_resumed_by_its_printed_paths(
    tiny_musique, glmrag_cache, tmp_path, monkeypatch
):
    """Issue 50 item 2: train with overrides (they name the run), then pass the checkpoint path the job printed
    back to eval.py and to a resume, unquoted, as a user pastes it."""
    from glmrag.jobs import cli

    monkeypatch.chdir(tmp_path)  # checkpoints/<run name>/<run id>/ under the working folder, as a user has it
    tiny = [f"data.name={tiny_musique}", "model.gnn.hidden_channels=8", "model.gnn.num_layers=1", "logger=[csv]"]
    tiny += ["callbacks.rich_progress_bar=null", "n_boot=20", "evaluate=false", "model.scheduler=null"]
    _entry(cli.train, ["experiment=demo", *tiny, "model.optimizer.lr=0.002", "trainer.max_epochs=1"], monkeypatch)
    (log,) = tmp_path.glob("outputs/train/*/*/train.log")  # what the job printed, as its log file keeps it
    (line,) = [line for line in log.read_text().splitlines() if " - best checkpoint: " in line]
    best = Path(line.split(" - best checkpoint: ")[1])
    assert "+lr@0.002" in str(best) and "=" not in str(best.relative_to(tmp_path)) and best.is_file()

    _entry(cli.evaluate, ["retriever=[checkpoint]", f"ckpt_path={best}", "data=musique100", tiny[0], "n_boot=20",
                          "output_dir=ev"], monkeypatch)  # fmt: skip
    assert (tmp_path / "ev" / "metrics.json").is_file()
    last = best.parent / "last.ckpt"
    resumed = ["experiment=demo", *tiny, "model.optimizer.lr=0.002", "trainer.max_epochs=2", f"ckpt_path={last}"]
    _entry(cli.train, resumed, monkeypatch)
    assert torch.load(last, weights_only=True)["epoch"] == 1  # the second epoch, in the same run folder
