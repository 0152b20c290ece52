"""The evaluation job end to end, through Hydra, on the embedded toy and MuSiQue sets."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from glmrag.jobs.evaluate import run_eval

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _compose(overrides):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="eval", overrides=overrides)


def test_every_data_and_retriever_config_composes():
    for data in sorted(p.stem for p in (ROOT / "configs" / "data").glob("*.yaml")):
        cfg = _compose([f"data={data}", "output_dir=unused"])
        assert cfg.data.name == data
        assert set(cfg.retriever) == {"dense", "ppr"}
        assert cfg.index.extractor == cfg.data.extractor


def test_eval_job_on_toy_writes_metrics_for_both_retrievers(cache, tmp_path):
    out = tmp_path / "out"
    cfg = _compose(["data=toy", f"output_dir={out}", "n_boot=200"])
    result = run_eval(cfg)
    assert result.systems == ["dense", "ppr"]
    metrics = json.loads((out / "metrics.json").read_text())
    lines = (out / "per_question.jsonl").read_text().splitlines()
    assert len(lines) == 2  # two systems x one question
    assert "| dense (ref) |" in (out / "results.md").read_text()
    # the toy question's one gold passage is among the 3 passages: Recall@5 is 1 for any ranking
    assert json.dumps(metrics).count('"recall@5"') >= 2
    assert result.overall["ppr"]["recall@5"].mean == pytest.approx(1.0)
    assert (cache / "indexes").is_dir() and (cache / "embeddings").is_dir()
    # no QA and no LLM: no answers, no QA tables, no cost columns
    assert not {"llm_cost", "qa_baselines", "qa"} & set(metrics["settings"])
    row = json.loads(lines[0])
    assert not [k for k in row if k.startswith("llm_") or k == "prediction"] and row["em"] is None
    assert "QA baseline" not in (out / "results.md").read_text()


@pytest.mark.slow
def test_eval_script_on_musique_subset(cache, tmp_path):
    out = tmp_path / "mq"
    cmd = [sys.executable, "eval.py", "data.limit=20", "data.split=test", f"output_dir={out}", "n_boot=200"]
    cmd.append(f"results_dir={tmp_path / 'results'}")  # the results store, outside the repository
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    metrics = json.loads((out / "metrics.json").read_text())
    assert len({json.loads(line)["question_id"] for line in (out / "per_question.jsonl").open()}) == 20
    assert set(metrics["overall"]) == {"dense", "ppr"}
    # filed under the run name, which names the overrides that change results (not output_dir, results_dir)
    stored = [p.parent.name for p in (tmp_path / "results").glob("*/metrics.json")]
    assert stored == ["eval-musique100-limit@20+split@test+n_boot@200"]


def _scripted_reader(monkeypatch, llm):
    """Build the reader from the composed ``reader`` node with ``llm`` in place of its configured LLM."""
    import hydra

    from glmrag.jobs import evaluate as pipeline

    monkeypatch.setattr(pipeline, "make_reader", lambda node: hydra.utils.instantiate(node, llm=llm))


def test_reader_config_builds_only_when_asked_and_names_its_dataset(scripted_llm):
    import hydra

    from glmrag.qa import QAReader

    cfg = _compose(["data=2wiki_test", "output_dir=unused"])
    assert cfg.qa is False and list(cfg.qa_baselines) == ["no_context", "subgraph"]
    assert cfg.reader.llm._target_ == "glmrag.llm.local.LocalLLM"  # configs/llm/local.yaml
    reader = hydra.utils.instantiate(cfg.reader, llm=scripted_llm(lambda text: "Answer: x"))
    assert isinstance(reader, QAReader)
    assert (reader.family, reader.passages, reader.max_new_tokens) == ("2wiki", 5, 128)


def test_eval_job_with_qa_on_toy_scores_answers_baselines_and_cost(glmrag_cache, tmp_path, monkeypatch, scripted_llm):
    # Reads the gold passage -> the gold answer; no passages (no_context, subgraph) -> a wrong one.
    llm = scripted_llm(
        lambda text: (
            "Thought: it says so.\nAnswer: Thomas C. Sudhof."
            if "Wikipedia Title: Thomas C. Sudhof\n" in text.split("Question: ")[-2]
            else "Thought: I cannot tell.\nAnswer: Karl Deisseroth."
        )
    )
    _scripted_reader(monkeypatch, llm)
    out = tmp_path / "out"
    result = run_eval(_compose(["data=toy", f"output_dir={out}", "n_boot=200", "qa=true", "retriever=[dense]"]))

    assert result.overall["dense"]["em"].mean == 1.0 and result.overall["dense"]["f1"].mean == 1.0
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"em", "f1"} <= set(metrics["metrics"])
    baselines = metrics["settings"]["qa_baselines"]
    assert set(baselines) == {"no_context", "subgraph"}
    assert baselines["no_context"]["em"]["mean"] == 0.0 and baselines["subgraph"]["f1"]["mean"] == 0.0
    cost = metrics["settings"]["llm_cost"]
    assert set(cost) == {"dense", "no_context", "subgraph"}
    assert cost["dense"]["reader"]["calls"] == 1.0 and cost["dense"]["retriever"]["calls"] == 0.0
    assert cost["dense"]["total"]["generated_tokens"] == 8.0  # "Thought: it says so. Answer: Thomas C. Sudhof."
    assert cost["dense"]["total"]["seconds"] == pytest.approx(0.01)  # the scripted LLM's time per call
    assert metrics["settings"]["qa"]["answer_fallbacks"] == {"dense": 0, "no_context": 0, "subgraph": 0}
    (row,) = [json.loads(line) for line in (out / "per_question.jsonl").open()]
    assert row["prediction"] == "Thomas C. Sudhof" and row["em"] == 1.0
    assert (row["llm_calls"], row["llm_generated_tokens"]) == (1, 8)
    assert row["llm_prompt_tokens"] == len(llm.prompts[0].split())
    report = (out / "results.md").read_text()
    assert "| no_context | 0.0 [0.0, 0.0] | 0.0 [0.0, 0.0] |" in report
    assert "| System | ms / question | LLM calls |" in report and "| dense | " in report.split("ms / question")[1]


@pytest.mark.slow
def test_eval_job_with_qa_on_musique_subset(cache, tmp_path, monkeypatch, scripted_llm):
    from glmrag.data.registry import load_dataset

    questions = list(load_dataset("musique100", split="test", limit=3).qa)  # the run's questions
    gold = {q.question: q.answers[0] for q in questions}

    def reply(text: str) -> str:
        asked = text.split("Question: ")[-1].removesuffix("\nThought: ")
        context = text.split("Question: ")[-2]
        if "Wikipedia Title: " in context:  # passages: right on the first and third question
            return f"Answer: {gold[asked]}" if asked != questions[1].question else "Answer: nobody"
        if "Knowledge Graph Triples:" in context:  # subgraph: right on the first only
            return f"Answer: {gold[asked]}" if asked == questions[0].question else "Answer: nobody"
        return "I have no idea"  # no context: wrong, without "Answer:" (a counted fallback)

    _scripted_reader(monkeypatch, scripted_llm(reply))
    out = tmp_path / "mq"
    overrides = ["data=musique100", "data.split=test", "data.limit=3", "retriever=[dense]", "qa=true"]
    run_eval(_compose([*overrides, f"output_dir={out}", "n_boot=200"]))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["dense"]["em"]["mean"] == pytest.approx(2 / 3)
    baselines = metrics["settings"]["qa_baselines"]
    assert baselines["subgraph"]["em"]["mean"] == pytest.approx(1 / 3) and baselines["no_context"]["em"]["mean"] == 0
    assert metrics["settings"]["qa"]["answer_fallbacks"] == {"dense": 0, "no_context": 3, "subgraph": 0}
    assert metrics["settings"]["llm_cost"]["subgraph"]["reader"]["calls"] == 1.0
    rows = [json.loads(line) for line in (out / "per_question.jsonl").open()]
    assert len(rows) == 3 and all(r["llm_calls"] == 1 and r["llm_prompt_tokens"] > 300 for r in rows)


@pytest.mark.parametrize("study", sorted(p.stem for p in (ROOT / "configs" / "eval_study").glob("*.yaml")))
def test_every_eval_study_composes_with_its_systems(study):
    cfg = _compose([f"eval_study={study}", "output_dir=unused"])
    systems = list(cfg.retriever)
    assert cfg.study == study and cfg.reference == systems[0] and {"dense", "ppr"} <= set(systems)
    assert all(str(cfg.retriever[s]._target_).startswith("glmrag.retrievers.") for s in systems)
    assert any(s.startswith(study) for s in systems[1:]), "a study compares its method's variants"
    # every LLM-backed system tags its usage with its own config key, so cost per question is per system
    for s in systems:
        if "name" in cfg.retriever[s]:
            assert cfg.retriever[s].name == s


def _main(entry, args, monkeypatch, capsys):
    """Run a console script's entry point in this process with ``args``; its exit code and printed text."""
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.setattr(sys, "argv", ["eval.py", *args])
    code = 0
    try:
        entry()
    except SystemExit as stop:
        code = stop.code
    finally:
        GlobalHydra.instance().clear()
    out = capsys.readouterr()
    return code, out.out + out.err


def test_help_shows_the_common_commands_and_the_valid_names(monkeypatch, capsys):
    """Issue 25 item 10: --help listed the training groups, no example and no way to evaluate a checkpoint."""
    from glmrag.jobs import cli

    code, text = _main(cli.evaluate, ["--help"], monkeypatch, capsys)
    assert code == 0
    assert "ckpt_path=checkpoints/" in text and "'retriever=[checkpoint,dense,ppr]'" in text  # a checkpoint
    retrievers = ", ".join(sorted(p.stem for p in (ROOT / "configs" / "retriever").glob("*.yaml")))
    assert f"retriever:   {retrievers}\n" in text
    assert "experiment:" not in text and "trainer:" not in text  # training groups belong to train.py --help
    code, text = _main(cli.train, ["--help"], monkeypatch, capsys)
    assert code == 0 and "python train.py experiment=demo " in text
    assert f"experiment:  {', '.join(cli.choices('experiment'))}\n" in text


@pytest.mark.parametrize(
    ("args", "group", "name", "hint"),
    [
        (["retriever=[dense,dnse]"], "retriever", "dnse", "dense"),
        (["data=musique"], "data", "musique", "musique100"),
        (["n_boot=10", "llm@reader.llm=htp"], "llm", "htp", "http"),
        (["retriever=[ppr]", "eval_study=dtkg,zzz"], "eval_study", "zzz", None),  # a sweep: each of its values
    ],
)
def test_an_unknown_config_name_is_an_error_listing_the_valid_ones(args, group, name, hint):
    from glmrag.jobs.cli import choices, unknown_choice_error

    message = unknown_choice_error(args, "eval.py")
    assert message.startswith(f"eval.py: no {group} config named {name!r}")
    assert f"are: {', '.join(choices(group))}." in message
    assert (f"Did you mean {hint!r}?" in message) == (hint is not None)
    assert (
        unknown_choice_error(["retriever=[dense,ppr]", "data.limit=5", "+system/capacity=glm_rag", "-m"], "x") is None
    )


def test_the_entry_point_stops_on_an_unknown_retriever_before_hydra(monkeypatch, capsys):
    from glmrag.jobs import cli

    code, text = _main(cli.evaluate, ["retriever=[dnse]"], monkeypatch, capsys)
    assert code == 2
    assert "no retriever config named 'dnse'" in text and "checkpoint, dense, dtkg" in text


def test_lightning_lines_go_through_the_root_handlers_once(monkeypatch):
    """Issue 25 item 9: one line per message; Lightning's own stderr handler is dropped for the root's."""
    import logging

    from glmrag.jobs.cli import one_line_per_message

    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    lightning = logging.getLogger("lightning.pytorch")
    monkeypatch.setattr(lightning, "handlers", [logging.StreamHandler()])
    monkeypatch.setattr(lightning, "propagate", False)
    parent = logging.getLogger("lightning")  # its own "INFO: ..." handler printed every line a second time
    monkeypatch.setattr(parent, "handlers", [logging.StreamHandler()])
    root = logging.getLogger()
    collect = Collect()
    root.addHandler(collect)
    try:
        one_line_per_message()
        assert lightning.handlers == [] and lightning.propagate and parent.handlers == []
        with monkeypatch.context() as m:
            m.setattr(root, "level", logging.INFO)
            logging.getLogger("lightning.pytorch.utilities.rank_zero").info("Seed set to 0")
            logging.getLogger("lightning.pytorch.utilities.rank_zero").info("💡 Tip: try a logging service")
    finally:
        root.removeHandler(collect)
    assert lines == ["Seed set to 0"]


def test_a_checkpoint_system_is_named_by_its_run(tmp_path):
    """Every checkpoint was labelled ``checkpoint`` in the tables; now by the run name train.py saves in it, with
    the file's stem when another system has that name (two checkpoints of one run), else by the stem alone."""
    import torch

    from glmrag.api import compose_config
    from glmrag.jobs.evaluate import checkpoint_name, system_names, with_system_names

    ckpt = tmp_path / "epoch03-recall2_0.3000.ckpt"
    torch.save({"callbacks": {"RunConfig": {"run_name": "gnn-musique100"}}}, ckpt)
    cfg = compose_config("eval", ["retriever=[checkpoint,ppr]", f"ckpt_path={ckpt}", "reference=checkpoint"])
    named = with_system_names(cfg)
    assert list(named.retriever) == ["gnn-musique100", "ppr"] and named.reference == "gnn-musique100"
    assert named.retriever["gnn-musique100"].ckpt_path == str(ckpt) and list(cfg.retriever)[0] == "checkpoint"
    torch.save({"state_dict": {}}, tmp_path / "old.ckpt")  # written before checkpoints carried their run
    assert checkpoint_name(str(tmp_path / "old.ckpt")) == "old" and checkpoint_name("missing.ckpt") == "missing"
    taken = {"checkpoint": {"ckpt_path": str(ckpt)}, "gnn-musique100": {"ckpt_path": "other.ckpt"}}
    assert system_names(taken)["checkpoint"] == "gnn-musique100/epoch03-recall2_0.3000"
    unchanged = compose_config("eval", ["retriever=[dense,ppr]"])
    assert with_system_names(unchanged) is unchanged
