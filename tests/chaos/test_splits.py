"""Training questions are never scored as test questions (issue 22, probes 61-64; issue 37, probes 1-4): the same
files under another dataset name or in another spelling, a checkpoint whose stored splits lie or that records no
questions, a training split that is the test split, one questions file that repeats a question under a new id, and
the Python API, which guards and measures as eval.py does."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch

from glmrag.api import evaluate_systems
from glmrag.data import registry
from glmrag.data.types import canonical_question, question_fingerprint
from glmrag.eval import format_markdown
from glmrag.index.cache import get_index
from glmrag.jobs.config_check import ConfigError, validate_train_config
from glmrag.jobs.evaluate import run_eval
from glmrag.jobs.train import run_train
from glmrag.models.checkpointing import SEEN_QUESTIONS_KEY, SEEN_VERSION_KEY
from tests.chaos.conftest import compose_config

pytestmark = pytest.mark.chaos


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Datasets registered by a test (``data=files``) are forgotten after it."""
    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))


@pytest.fixture(scope="module")
def checkpoint(tiny_musique, glmrag_cache, tmp_path_factory) -> Path:
    """The best checkpoint of a one-epoch demo on musique_tiny (10 train / 3 validation / 3 test questions)."""
    tmp = tmp_path_factory.mktemp("split-run")
    overrides = ["experiment=demo", f"data.name={tiny_musique}"]
    overrides += ["model.gnn.hidden_channels=8", "model.gnn.num_layers=1"]
    overrides += ["trainer.max_epochs=1", "logger=[csv]", "evaluate=false", "test=false"]
    overrides += ["callbacks.rich_progress_bar=null", f"output_dir={tmp / 'out'}", f"results_dir={tmp / 'r'}"]
    out = run_train(compose_config("train", [*overrides, f"checkpoint_dir={tmp / 'run'}"]))
    return Path(out["best_checkpoint"])


def evaluate(checkpoint: Path, tmp: Path, *overrides: str):
    out = tempfile.mkdtemp(prefix="eval-", dir=tmp)  # a folder of its own for each run
    base = ["retriever=[checkpoint,dense]", f"ckpt_path={checkpoint}", f"output_dir={out}", "n_boot=50"]
    return run_eval(compose_config("eval", [*base, f"results_dir={tmp / 'r'}", *overrides]))


def outputs(result, name: str) -> str:
    """The text of the file ``name`` that the run of ``result`` wrote."""
    return (Path(result.config["output_dir"]) / name).read_text()


RUN = "gfm_rag_plus_demo-musique_tiny"
"""The checkpoint's system name in the tables (named by its run)."""


def test_a_checkpoint_records_the_questions_it_trained_and_validated_on(checkpoint):
    ckpt = torch.load(checkpoint, weights_only=True)
    seen = ckpt[SEEN_QUESTIONS_KEY]
    assert len(seen) == 13 and seen == sorted(seen)  # 10 training + 3 validation questions
    assert ckpt[SEEN_VERSION_KEY] == 2


@pytest.mark.integration  # indexes a copy of musique_tiny
def test_the_same_files_under_another_name_are_refused_then_flagged(checkpoint, tiny_musique_files, tmp_path):
    questions, corpus = tiny_musique_files
    copy = ["data=files", "data.format=hipporag", "data.name=small_copy", f"data.questions={questions}"]
    copy += [f"data.corpus={corpus}", "data.split=null"]
    with pytest.raises(ValueError, match=rf"retriever {RUN} .* trained or validated on 13 of the 16 questions"):
        evaluate(checkpoint, tmp_path, *copy)
    result = evaluate(checkpoint, tmp_path, *copy, "allow_train_overlap=true")
    assert result.train_overlap == {RUN: "13 of these 16 questions"}
    assert "evaluated on questions it trained or selected on" in outputs(result, "results.md")


def test_stored_splits_that_lie_do_not_decide(checkpoint, tiny_musique, tmp_path):
    lying = tmp_path / "lying.ckpt"
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["datamodule_hyper_parameters"]["test_split"] = "train"  # data.split=null would pick its training split
    torch.save(ckpt, lying)
    with pytest.raises(ValueError, match=r"trained or validated on 10 of the 10 questions"):
        evaluate(lying, tmp_path, "data=musique100", f"data.name={tiny_musique}", "data.split=null")


QUESTION = "Who is the father of Brad's wife?"
SPELLINGS = {
    "no question mark": "Who is the father of Brad's wife",
    "full-width first letter": "\uff37ho is the father of Brad's wife?",
    "zero-width space": "Who is the\u200b father of Brad's wife?",
    "curly apostrophe": "Who is the father of Brad\u2019s wife?",
    "no-break space": "Who is the\u00a0father of Brad's wife?",
    "upper case and spacing": "  WHO IS THE FATHER   OF BRAD'S WIFE?",
}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_question_has_one_fingerprint_in_every_spelling(spelling):
    assert question_fingerprint(SPELLINGS[spelling]) == question_fingerprint(QUESTION)
    assert canonical_question(QUESTION) == "who is the father of brads wife"
    assert question_fingerprint("Who is the mother of Brad's wife?") != question_fingerprint(QUESTION)


def respelt(text: str) -> str:
    """Every spelling change of :data:`SPELLINGS` at once: full-width first letter, zero-width and no-break spaces,
    upper case, curly apostrophes, no question mark."""
    first, rest = text[0], text[1:]
    if "!" <= first <= "~":
        first = chr(ord(first) + 0xFEE0)  # the full-width form, which NFKC maps back
    words = (first + rest).replace("'", "\u2019").rstrip("?").upper().split(" ")
    return " \u200b".join(words[:2]) + " " + "\u00a0".join(words[2:])


def test_respelt_questions_under_new_ids_and_another_name_are_refused(checkpoint, tiny_musique_files, tmp_path):
    questions, corpus = tiny_musique_files
    records = json.loads(questions.read_text())
    for i, record in enumerate(records):
        record["question"], record["id"] = respelt(record["question"]), f"new-{i}"
    respelt_file = tmp_path / "respelt.json"
    respelt_file.write_text(json.dumps(records))
    copy = ["data=files", "data.format=hipporag", "data.name=respelt", f"data.questions={respelt_file}"]
    copy += [f"data.corpus={corpus}", "data.split=null"]
    with pytest.raises(ValueError, match=rf"retriever {RUN} .* trained or validated on 13 of the 16 questions"):
        evaluate(checkpoint, tmp_path, *copy)


def resaved(checkpoint: Path, path: Path, **entries) -> Path:
    """``checkpoint`` saved again at ``path`` with ``entries`` set (None: removed)."""
    ckpt = torch.load(checkpoint, weights_only=True)
    for key, value in entries.items():
        if value is None:
            ckpt.pop(key)
        else:
            ckpt[key] = value
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("seen", [None, []], ids=["key removed", "empty"])
def test_a_checkpoint_that_records_no_questions_is_flagged_or_refused(checkpoint, tiny_musique, tmp_path, seen):
    silent = resaved(checkpoint, tmp_path / "silent.ckpt", **{SEEN_QUESTIONS_KEY: seen})
    data = ["data=musique100", f"data.name={tiny_musique}", "data.split=test"]
    result = evaluate(silent, tmp_path, *data)
    assert result.overlap_unchecked == {RUN: "its checkpoint records no questions it trained on"}
    report = outputs(result, "results.md")
    assert f"| {RUN} (ref) (training questions not checked) |" in report and "not checked for questions" in report
    assert json.loads(outputs(result, "metrics.json"))["settings"]["overlap_unchecked"]
    with pytest.raises(ValueError, match=rf"strict_overlap=true: cannot check retriever {RUN}"):
        evaluate(silent, tmp_path, *data, "strict_overlap=true")


def test_a_checkpoint_of_another_fingerprint_rule_is_refused_by_name(checkpoint, tiny_musique, tmp_path):
    other = resaved(checkpoint, tmp_path / "other.ckpt", **{SEEN_VERSION_KEY: None})  # unstated: version 1
    data = ["data=musique100", f"data.name={tiny_musique}", "data.split=test"]
    with pytest.raises(ValueError, match=r"fingerprints of version 1; this glmrag reads version 2 only"):
        evaluate(other, tmp_path, *data)


def test_training_on_the_split_the_run_scores_is_refused_before_training(train_config):
    for override, scored in (
        ("datamodule.train_split=test", "eval_split"),
        ("datamodule.val_split=test", "eval_split"),
    ):
        cfg = train_config(["experiment=demo", "output_dir=x", override])
        with pytest.raises(ConfigError, match=rf"{override.split('=')[0]}='test' is also the run's {scored}"):
            validate_train_config(cfg)
    cfg = train_config(["experiment=demo", "output_dir=x", "datamodule.train_split=test", "evaluate=false"])
    with pytest.raises(ConfigError, match=r"datamodule.test_split"):  # Trainer.test scores it too
        validate_train_config(cfg)
    transfer = ["experiment=demo", "output_dir=x", "datamodule.train_split=test", "test=false", "eval_data=[2wiki_dev]"]
    validate_train_config(train_config(transfer))  # the test split of another dataset is no overlap


def test_questions_repeated_under_new_ids_are_refused_before_training(tiny_musique_files, glmrag_cache, tmp_path):
    questions, corpus = tiny_musique_files
    records = json.loads(questions.read_text())
    doubled = tmp_path / "doubled.json"  # splits follow ids: the copies land in other splits than their originals
    doubled.write_text(json.dumps(records + [{**r, "id": f"copy-{i}"} for i, r in enumerate(records)]))
    overrides = ["experiment=demo", "data=files", "data.format=hipporag", "data.name=doubled"]
    overrides += [f"data.questions={doubled}", f"data.corpus={corpus}", "model.gnn.hidden_channels=8"]
    overrides += ["model.gnn.num_layers=1", "trainer.max_epochs=1", "logger=[csv]", "callbacks.rich_progress_bar=null"]
    overrides += [f"output_dir={tmp_path / 'out'}", f"results_dir={tmp_path / 'r'}"]
    overrides += [f"checkpoint_dir={tmp_path / 'run'}"]
    with pytest.raises(ValueError, match=r"question\(s\) of doubled's '\w+' split repeat the text of doubled's") as err:
        run_train(compose_config("train", overrides))
    assert "doubled.json" in str(err.value) and "Remove the repeated questions" in str(err.value)
    assert not list(tmp_path.rglob("*.ckpt"))  # refused in setup, before the first step


def test_the_python_api_guards_and_measures_as_eval_py_does(checkpoint, tiny_musique, tmp_path):
    """Issue 37, probe 3: ``evaluate_systems`` ran no overlap check and ranked only max(ks) passages (MRR 0.6146
    against eval.py's 0.6214 on the same checkpoint and questions)."""
    full, test = registry.load_dataset(tiny_musique), registry.load_dataset(tiny_musique, split="test")
    index_cfg = compose_config("eval", ["data=musique100", f"data.name={tiny_musique}", "output_dir=unused"]).index
    index = get_index(full, index_cfg)
    with pytest.raises(ValueError, match=rf"retriever {RUN} .* trained or validated on 13 of the 16 questions"):
        evaluate_systems({RUN: str(checkpoint), "dense": "dense"}, full, index, n_boot=50)
    flagged = evaluate_systems({RUN: str(checkpoint)}, full, index, n_boot=50, allow_train_overlap=True)
    assert flagged.result.train_overlap == {RUN: "13 of these 16 questions"}
    api = evaluate_systems({RUN: str(checkpoint), "dense": "dense"}, test, index, n_boot=50).result
    job = evaluate(checkpoint, tmp_path, "data=musique100", f"data.name={tiny_musique}", "data.split=test")
    for system in (RUN, "dense"):
        assert api.overall[system]["mrr"].mean == pytest.approx(job.overall[system]["mrr"].mean)
    assert api.ranking_depth is None and "| MRR |" in format_markdown(api)
    cut = evaluate(checkpoint, tmp_path, "data=musique100", f"data.name={tiny_musique}", "data.split=test", "top_k=10")
    assert cut.ranking_depth == 10 and "| MRR@10 |" in outputs(cut, "results.md")
