"""A user's mistake on the command line or in a file is one message naming the key, file or record and the fix,
found before any work where it can be, and printed without a traceback (which HYDRA_FULL_ERROR=1 or --verbose
bring back)."""

import logging
import os
import sys

import pytest

from glmrag.data.types import DataFormatError
from glmrag.jobs.cli import FULL_ERROR_ENV, argument_error, reported_errors


@pytest.mark.parametrize(
    ("arg", "says", "hint"),
    [
        ("trainer.max_epoch=2", "'trainer' has no key 'max_epoch'. Did you mean trainer.max_epochs?", True),
        (
            "model.gnn.hiden_channels=8",
            "'model.gnn' has no key 'hiden_channels'. Did you mean model.gnn.hidden_ch",
            False,
        ),
        ("trainr.max_epochs=2", "the top level has no key 'trainr'. Did you mean trainer?", True),
    ],
)
def test_a_mistyped_nested_key_gets_a_did_you_mean(arg, says, hint):
    message = argument_error(["experiment=demo_2wiki", arg], "train", "train.py")
    assert message.startswith(f"train.py: '{arg}': {says}")
    # a plain node takes a new key with +; a typed one (a dataclass) takes none, so no such hint
    assert ("To add a new key on purpose: +" in message) == hint


def test_two_mistyped_keys_under_one_node_get_the_message_not_a_traceback():
    args = ["experiment=demo_2wiki", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"]
    message = argument_error(args, "train", "train.py")  # one of the two, with its fix; the other comes next run
    assert message.startswith("train.py: 'trainer.limit_val_batches=1': 'trainer' has no key 'limit_val_batches'")
    assert "To add a new key on purpose: +trainer.limit_val_batches=1" in message


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("datamodule.batch_size=${data.nonexistent}", "Interpolation key 'data.nonexistent' not found"),
        ("datamodule.batch_size=${oc.env:GLMRAG_TEST_UNSET}", "Environment variable 'GLMRAG_TEST_UNSET' not found"),
    ],
)
def test_an_interpolation_that_cannot_resolve_names_its_key_before_any_work(arg, says, monkeypatch):
    monkeypatch.delenv("GLMRAG_TEST_UNSET", raising=False)
    message = argument_error(["experiment=demo_2wiki", arg], "train", "train.py")
    assert message.startswith("train.py: datamodule.batch_size: ") and says in message
    assert "full_key" not in message  # OmegaConf's own trailer lines are left out


def test_a_run_folder_that_cannot_be_made_is_refused_and_nothing_is_left(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    message = argument_error([f"hydra.run.dir={afile}/run"], "eval", "eval.py")
    assert message.startswith(f"eval.py: hydra.run.dir={afile}/run: cannot make the run folder there")
    assert argument_error([f"hydra.run.dir={tmp_path}/new/run"], "eval", "eval.py") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # the check made and removed its own folder


def test_a_good_command_line_and_help_pass():
    assert argument_error(["experiment=demo_2wiki", "trainer.max_epochs=1", "+foo=1"], "train", "train.py") is None
    assert argument_error(["-m", "experiment=demo", "trainer.max_epochs=1,2"], "train", "train.py") is None
    assert argument_error(["trainer.max_epoch=2", "--help"], "train", "train.py") is None


def test_an_unparsable_override_says_how_to_quote_it():
    message = argument_error(["ckpt_path=a=b"], "eval", "eval.py")
    assert message.startswith("eval.py: cannot read 'ckpt_path=a=b'") and "key='a=b'" in message


def test_a_users_mistake_prints_its_message_and_no_traceback(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(FULL_ERROR_ENV, raising=False)
    error = DataFormatError("q.json", "question 4 (id 'q4')", "has no 'question'", "a non-empty question string")
    log_file = logging.FileHandler(tmp_path / "train.log")  # Hydra's job log
    logging.getLogger().addHandler(log_file)
    try:
        with pytest.raises(SystemExit) as stop, reported_errors("train.py"):
            raise error
    finally:
        logging.getLogger().removeHandler(log_file)
        log_file.close()
    assert stop.value.code == 1 and stop.value.__cause__ is None and stop.value.__suppress_context__
    err = capsys.readouterr().err
    assert err == f"train.py: {error}\n(the traceback: HYDRA_FULL_ERROR=1 or --verbose)\n"  # on stderr, once
    assert (tmp_path / "train.log").read_text() == f"train.py: {error}\n"  # and in the job's log


def test_the_full_traceback_is_behind_hydra_full_error_or_verbose(monkeypatch):
    monkeypatch.setenv(FULL_ERROR_ENV, "1")
    with pytest.raises(FileNotFoundError), reported_errors("eval.py"):
        raise FileNotFoundError("x.json does not exist")
    monkeypatch.delenv(FULL_ERROR_ENV)
    with pytest.raises(RuntimeError), reported_errors("eval.py"):  # not a user's mistake: a bug keeps its trace
        raise RuntimeError("bug")

    from glmrag.jobs.cli import _check_arguments

    monkeypatch.setattr(sys, "argv", ["eval.py", "--verbose", "data=toy"])
    _check_arguments("glmrag-eval", "eval")
    assert sys.argv == ["eval.py", "data=toy"] and os.environ[FULL_ERROR_ENV] == "1"


def test_output_dir_takes_hydras_run_folder_too(tmp_path):
    """eval.py output_dir=X wrote X and also outputs/eval/<run>/<time>/ (.hydra, eval.log) under the working folder."""
    from glmrag.jobs.cli import run_folder_follows_output_dir

    args = ["data=toy", f"output_dir={tmp_path / 'x'}"]
    assert run_folder_follows_output_dir(args) == [*args, f"hydra.run.dir={tmp_path / 'x'}"]
    assert run_folder_follows_output_dir(["data=toy"]) == ["data=toy"]
    chosen = [*args, "hydra.run.dir=elsewhere"]
    assert run_folder_follows_output_dir(chosen) == chosen
    assert run_folder_follows_output_dir(["-m", *args]) == ["-m", *args]  # a sweep's jobs keep a folder each


def test_an_output_dir_holding_a_run_is_refused_before_hydra_writes_into_it(tmp_path):
    used = tmp_path / "used"
    (used / ".hydra").mkdir(parents=True)
    (used / ".hydra" / "config.yaml").write_text("earlier: run\n")
    message = argument_error(["data=toy", f"output_dir={used}"], "eval", "eval.py")
    assert message == f"eval.py: output_dir={used} holds a Hydra run folder already; pass a new output_dir=<folder>"
    (used / "metrics.json").write_text("{}")
    message = argument_error(["data=toy", f"output_dir={used}"], "eval", "eval.py")
    assert message.startswith(f"eval.py: output_dir={used} already holds metrics.json")
    assert (used / ".hydra" / "config.yaml").read_text() == "earlier: run\n"
    assert argument_error(["data=toy", f"output_dir={tmp_path / 'new'}"], "eval", "eval.py") is None


def test_an_error_a_constructor_raised_through_hydra_is_reported_as_its_own(capsys, monkeypatch):
    """A DataModule refusing its records_dir was wrapped by Hydra's instantiate ('Error in call to target')."""
    from hydra.errors import InstantiationException

    monkeypatch.delenv(FULL_ERROR_ENV, raising=False)
    wrapped = InstantiationException("Error in call to target 'glmrag...KGQADataModule'")
    wrapped.__cause__ = NotADirectoryError("datamodule.records_dir=/x is a file; give a folder for the chunks")
    with pytest.raises(SystemExit), reported_errors("train.py"):
        raise wrapped
    assert capsys.readouterr().err.startswith("train.py: datamodule.records_dir=/x is a file; give a folder")
    wrapped.__cause__ = RuntimeError("a bug")
    with pytest.raises(InstantiationException), reported_errors("train.py"):  # a bug keeps its traceback
        raise wrapped
