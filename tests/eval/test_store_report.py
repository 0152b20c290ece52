"""The results store (glmrag.eval.store) and the study report (glmrag.jobs.report) on tiny hand-made runs."""

import csv
import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from glmrag.data.types import Question
from glmrag.eval import evaluate
from glmrag.eval.outputs import metrics_json
from glmrag.eval.store import read_runs, run_record, write_run
from glmrag.eval.study_plots import figure_labels
from glmrag.jobs.common import resolved_config_yaml
from glmrag.jobs.evaluate import run_eval, store_eval_run
from glmrag.jobs.report import build_report, cli
from glmrag.jobs.train import store_train_run
from glmrag.retrievers.base import Ranking

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def result(index):
    questions = [Question("q_near", "b?", ("b",), ("p0",), hops=1), Question("q_deep", "d?", ("d",), ("p1", "p2"))]
    rankings = {
        "glm": [Ranking("q_near", ["p0", "p1"], [2.0, 1.0]), Ranking("q_deep", ["p1", "p2"], [2.0, 1.0])],
        "dense": [Ranking("q_near", ["p1", "p0"], [2.0, 1.0]), Ranking("q_deep", ["p3", "p1"], [2.0, 1.0])],
    }
    return evaluate(rankings, questions, index, ks=(1, 2), reference="glm", n_boot=50)


def test_store_writes_both_files_and_never_clobbers(result, tmp_path):
    first = write_run(tmp_path, "glm-mq", run_record(result, {"family": "glm"}, {"test/recall@2": 1.0}), "a: 1\n")
    second = write_run(tmp_path, "glm-mq", run_record(None, {"family": "glm"}), "a: 2\n")
    assert (first.name, second.name) == ("glm-mq", "glm-mq-2")
    assert (first / "config.yaml").read_text() == "a: 1\n" and (second / "config.yaml").read_text() == "a: 2\n"
    stored = json.loads((first / "metrics.json").read_text())
    assert {k: v for k, v in stored.items() if k not in ("run", "trainer", "per_question")} == json.loads(
        json.dumps(metrics_json(result))
    )
    assert stored["per_question"] == {  # paired comparisons between runs need every question's score
        "question_ids": ["q_near", "q_deep"],
        "recall@2": {"glm": [1.0, 1.0], "dense": [1.0, 0.5]},  # ks=(1, 2): no Recall@5 measured
    }
    assert stored["trainer"] == {"test/recall@2": 1.0} and stored["run"]["family"] == "glm"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["glm-mq", "glm-mq-2"]  # no temporary folder left
    runs = read_runs(tmp_path)
    assert [(r.run_id, r.evaluated) for r in runs] == [("glm-mq", True), ("glm-mq-2", False)]
    assert runs[0].metrics["overall"]["glm"]["recall@2"]["mean"] == 1.0


def test_store_names_are_folder_safe(tmp_path):
    path = write_run(tmp_path, "../glm t5/large", run_record(None, {}), "")
    assert path.parent == tmp_path and path.name == "_glm_t5_large"


def _iv(mean, half=0.1, n=20):
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def _run(
    root, run_id, family, r2, r5, *, settings, overrides=(), params=1000, marker="*", ms=None, hops=None, trained=None
):
    """A stored run as train.py writes it: one trained system (the reference) and dense."""
    ref = run_id
    metrics = {
        "systems": [ref, "dense"],
        "reference": ref,
        "ks": [2, 5],
        "counts": {"questions": 20, "evaluated": 20, "excluded_no_gold": 0},
        "settings": {"n_boot": 1000} | ({"ms_per_question": {ref: ms, "dense": 1.0}} if ms else {}),
        "metrics": ["recall@2", "recall@5"],
        "overall": {
            ref: {"recall@2": _iv(r2), "recall@5": _iv(r5)},
            "dense": {"recall@2": _iv(0.4), "recall@5": _iv(0.6)},
        },
        "breakdowns": {
            "hops": {ref: hops or {"2": {"n": 12, "recall@2": r2}, "3": {"n": 8, "recall@2": r2 / 2}}, "dense": {}},
            "n_supporting": {ref: {"2": {"n": 20, "recall@2": r2}}, "dense": {"2": {"n": 20, "recall@2": 0.4}}},
        },
        "significance": [
            {"system": "dense", "reference": ref, "metric": "recall@2", "marker": marker},
            {"system": "dense", "reference": ref, "metric": "recall@5", "marker": ""},
        ],
    }
    run = {"family": family, "settings": settings, "overrides": list(overrides), "num_parameters": params}
    run |= {"num_trainable_parameters": trained} if trained else {}
    write_run(root, run_id, metrics | run_record(None, run | {"eval_data": "musique100"}), "")


def restriction_study(root):
    """Table 3 at toy scale: an unrestricted GNN and the GLM at 300 and 600 triplets (a run each)."""
    exp = "experiment=study_subgraph_restriction"
    _run(root, "gnn", "gfm_rag_star", 0.5, 0.7, settings={"model.hidden_channels": 32}, overrides=[exp, "+system=gnn"])
    for t, r2 in ((600, 0.45), (300, 0.3)):
        over = [exp, f"+system=glm_t{t}"]
        _run(root, f"glm_t{t}", "glm_rag", r2, 0.6, settings={"model.max_triplets": t}, overrides=over, marker="†")


def test_report_tables_hold_the_stored_values(tmp_path):
    restriction_study(tmp_path / "res")
    paths = build_report(tmp_path / "res", tmp_path / "out")
    md = paths["report.md"].read_text()
    # the paper table (Table 3 layout): one row per budget, one column per family; the GNN has no budget
    assert "| model.max_triplets | gfm_rag_star | glm_rag |" in md
    assert "| – | 50.0 [40.0, 60.0] | – |" in md
    assert "| 300 | – | 30.0 [20.0, 40.0] |" in md and "| 600 | – | 45.0 [35.0, 55.0] |" in md
    # the runs table: every system of every run, markers from each run's own tests
    assert "| glm_t300 | glm_t300 (ref) | 300 | 1,000 | 30.0 [20.0, 40.0] | 60.0 [50.0, 70.0] |" in md
    assert "| glm_t300 | dense |  | – | 40.0 [30.0, 50.0]† | 60.0 [50.0, 70.0] |" in md
    assert "| gnn | dense |  | – | 40.0 [30.0, 50.0]\\* | 60.0 [50.0, 70.0] |" in md
    with paths["runs.csv"].open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["run"], r["system"], r["model.max_triplets"]) for r in rows][:3] == [
        ("glm_t300", "glm_t300", "300"),
        ("glm_t300", "dense", ""),
        ("glm_t600", "glm_t600", "600"),
    ]
    assert float(rows[0]["recall@2_mean"]) == pytest.approx(0.3) and rows[1]["recall@2_marker"] == "†"
    with paths["paper_table.csv"].open() as f:
        paper = [r for r in csv.DictReader(f) if r["metric"] == "recall@2"]
    assert [(r["model.max_triplets"], r["family"], float(r["mean"])) for r in paper] == [
        ("", "gfm_rag_star", 0.5),  # no budget: empty in CSV, – in Markdown
        ("300", "glm_rag", 0.3),
        ("600", "glm_rag", 0.45),
    ]


def test_a_setting_recorded_only_by_newer_runs_is_not_a_sweep(tmp_path):
    """Restricted GNN runs record model.max_hops and model.max_triplets; the older unrestricted run records
    neither. The budget varies within both families; max_hops is only absent from the old run."""
    root = tmp_path / "res"
    restriction_study(root)
    for t, r2 in ((600, 0.55), (300, 0.35)):
        settings = {"model.max_triplets": t, "model.max_hops": 2}
        over = ["experiment=study_subgraph_restriction", f"+system=gfm_rag_star_t{t}"]
        _run(root, f"gnn_t{t}", "gfm_rag_star", r2, 0.7, settings=settings, overrides=over)
    md = build_report(root, tmp_path / "out")["report.md"].read_text()
    assert "| model.max_triplets | gfm_rag_star | glm_rag |" in md
    assert "| – | 50.0 [40.0, 60.0] | – |" in md
    assert "| 300 | 35.0 [25.0, 45.0] | 30.0 [20.0, 40.0] |" in md


def test_report_draws_the_sweep_and_the_breakdowns_as_png(tmp_path):
    restriction_study(tmp_path / "res")
    paths = build_report(tmp_path / "res")  # default: <results dir>/report
    assert paths["report.md"].parent == tmp_path / "res" / "report"
    drawn = {"recall_by_model_max_triplets.png", "recall_by_hops.png", "recall_by_n_supporting.png"}
    assert drawn <= set(paths) and "scaling.png" not in paths  # one size per family: no scaling curve
    for name in drawn:
        data = paths[name].read_bytes()
        assert data.startswith(PNG) and len(data) > 1000
        assert f"![{name}]({name})" in paths["report.md"].read_text()
    assert len(read_runs(tmp_path / "res")) == 3  # the report folder is not a run


def test_report_of_a_scaling_study_plots_recall_against_parameters(tmp_path, capsys):
    res = tmp_path / "res"
    for family, sizes in (("gfm_rag_star", (31e6, 122e6)), ("glm_rag", (36e6, 110e6))):
        for capacity, params, r2 in zip(("small", "base"), sizes, (0.4, 0.5), strict=True):
            over = [f"+system/capacity={family}", f"capacity={capacity}"]
            name = f"{family}_{capacity}"
            _run(res, name, family, r2, 0.6, settings={}, overrides=over, params=int(params), ms=12.5)
    assert cli(["report", str(res), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.split()
    assert {p.rsplit("/", 1)[1] for p in printed} >= {"scaling.png", "recall_by_capacity.png", "report.md"}
    assert (tmp_path / "out" / "scaling.png").read_bytes().startswith(PNG)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| capacity | gfm_rag_star | glm_rag |" in md and "| base | 50.0 [40.0, 60.0] | 50.0 [40.0, 60.0] |" in md
    row = "| glm_rag_small | glm_rag_small (ref) | small | 36.00M | 40.0 [30.0, 50.0] | 60.0 [50.0, 70.0] | 12.5 |"
    assert row in md  # the retrieval time per question (Table 7) is a column when measured


def test_a_capacity_study_of_frozen_layers_plots_recall_against_trained_parameters(tmp_path):
    """Issue 52's capacity points: the GLM holds the same MPNet whatever it freezes, so its parameter count never
    varies; the scaling figure then puts the trained parameters on its x axis instead of drawing nothing."""
    for frozen, trained, r2 in ((8, 28_000_000, 0.30), (4, 56_000_000, 0.35), (0, 85_000_000, 0.38)):
        over = [f"model.glm.frozen_layers={frozen}"]
        _run(tmp_path, f"glm_f{frozen}", "glm_mpnet_cpu", r2, 0.5, settings={}, overrides=over, params=110_000_000,
             trained=trained)  # fmt: skip
    paths = build_report(tmp_path, tmp_path / "out")
    assert "glm_mpnet_cpu" in figure_labels(paths["scaling.png"])
    assert "| glm_f4 | glm_f4 (ref) | 4 | 110.00M | 56.00M |" in paths["report.md"].read_text()  # the x of the figure
    with paths["runs.csv"].open() as f:
        assert {r["run"]: r["num_trainable_parameters"] for r in csv.DictReader(f) if r["reference"] == "True"} == {
            "glm_f8": "28000000", "glm_f4": "56000000", "glm_f0": "85000000"}  # fmt: skip
    for frozen in (8, 4, 0):  # the same runs also tested on a second set: a figure per set, never one through both
        _run(tmp_path, f"glm_f{frozen}_on_dev", "glm_mpnet_cpu", 0.6, 0.7, settings={}, params=110_000_000,
             overrides=[f"model.glm.frozen_layers={frozen}"], trained=85_000_000 >> frozen // 4)  # fmt: skip
        stored = json.loads((tmp_path / f"glm_f{frozen}_on_dev" / "metrics.json").read_text())
        stored["run"]["eval_data"] = "2wiki_dev"
        (tmp_path / f"glm_f{frozen}_on_dev" / "metrics.json").write_text(json.dumps(stored))
    paths = build_report(tmp_path, tmp_path / "out_two")
    assert {"scaling_on_musique100.png", "scaling_on_2wiki_dev.png"} <= set(paths) and "scaling.png" not in paths
    (tmp_path / "same").mkdir()
    for frozen in (8, 4):  # trained parameters recorded equal (an older run): nothing to draw against
        _run(tmp_path / "same", f"glm_f{frozen}", "glm_mpnet_cpu", 0.3, 0.5, settings={}, params=110_000_000,
             overrides=[f"model.glm.frozen_layers={frozen}"], trained=28_000_000)  # fmt: skip
    assert "scaling.png" not in build_report(tmp_path / "same", tmp_path / "out_same")


def test_report_needs_evaluated_runs(tmp_path):
    write_run(tmp_path, "x", run_record(None, {}), "")
    with pytest.raises(ValueError, match="no evaluated run"):
        build_report(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_report(tmp_path / "missing")


def test_eval_job_files_its_run_in_the_store(glmrag_cache, tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("eval", ["data=toy", f"output_dir={tmp_path / 'out'}", "n_boot=50", "study=mine"])
    cfg.results_dir = str(tmp_path / "results" / cfg.study)
    path = store_eval_run(cfg, run_eval(cfg))
    assert path == tmp_path / "results" / "mine" / "eval-toy"
    stored = json.loads((path / "metrics.json").read_text())
    assert stored["systems"] == ["dense", "ppr"] and stored["run"]["family"] == "dense"
    assert set(stored["settings"]["ms_per_question"]) == {"dense", "ppr"}
    assert "retriever:" in (path / "config.yaml").read_text()


def test_stored_config_keeps_the_times_the_run_used():
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", ["output_dir=x", "checkpoint_dir=ck/${now:%H-%M-%S.%f}", "study=s"])
    used = cfg.checkpoint_dir  # what the ModelCheckpoint was given
    config = OmegaConf.create(resolved_config_yaml(cfg))
    assert config.checkpoint_dir == used and config.results_dir == "results/s" and "hydra" not in config


def test_a_training_run_is_stored_once_per_evaluated_dataset(result, tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", ["output_dir=x", f"results_dir={tmp_path}", "model.gnn.hidden_channels=8"])
    model = torch.nn.Linear(2, 3)  # 9 parameters
    evals = {"musique100": result, "2wiki_test": result}
    paths = store_train_run(cfg, model, {"test/recall@2": 0.5}, "best.ckpt", evals)
    assert [p.name for p in paths] == ["gnn-musique100", "gnn-musique100_on_2wiki_test"]
    runs = read_runs(tmp_path)
    assert [(r.run["eval_data"], r.run["num_parameters"], r.evaluated) for r in runs] == [
        ("musique100", 9, True),
        ("2wiki_test", 9, True),
    ]
    assert runs[0].run["settings"]["model.gnn.hidden_channels"] == 8
    assert runs[0].metrics["trainer"]["test/recall@2"] == 0.5
    (unevaluated,) = store_train_run(cfg, model, {"train/loss": 1.0}, None, {})  # evaluate=false: the Trainer's only
    assert unevaluated.name == "gnn-musique100-2" and "overall" not in json.loads(
        (unevaluated / "metrics.json").read_text()
    )


def test_a_data_scaling_report_says_where_training_did_not_help(tmp_path):
    """Issue 50 item 4: three of four toy data-scaling runs said "training did not help" in metrics.json, and
    neither report.md nor the plot said so; the plot had no untrained or dense reference and no sizes."""
    from glmrag.eval.study_plots import figure_labels

    res = tmp_path / "res"
    warning = "the best checkpoint's val/recall@2 (0.2) is no better than the untrained model's: training did not help"
    for fraction, n, r2, helped in ((0.5, 30, 0.3, False), (1.0, 60, 0.45, True)):
        name = f"glm_f{fraction}"
        _run(res, name, "glm_rag", r2, 0.6, settings={"datamodule.train_fraction": fraction},
             overrides=["experiment=study_data_scaling", f"datamodule.train_fraction={fraction}"])  # fmt: skip
        metrics_path = res / name / "metrics.json"
        stored = json.loads(metrics_path.read_text())
        stored["systems"].append("untrained")
        stored["overall"]["untrained"] = {"recall@2": _iv(0.3), "recall@5": _iv(0.55)}
        stored["run"] |= {"train_questions": n, "warnings": [] if helped else [warning]}
        metrics_path.write_text(json.dumps(stored))
    paths = build_report(res, tmp_path / "out")
    md = paths["report.md"].read_text()
    assert f"**glm_f0.5: {warning}**" in md  # every run's warning, as the run filed it
    assert "| 0.5 | 30.0 [20.0, 40.0] (untrained) |" in md and "| 1.0 | 45.0 [35.0, 55.0] |" in md
    assert "(untrained): training did not help in that run" in md
    assert "| glm_f0.5 | glm_f0.5 (ref) | 0.5 | 30 | 1,000 |" in md  # the training questions of each point
    labels = figure_labels(paths["recall_by_datamodule_train_fraction.png"])
    assert labels == ["glm_rag (hollow: training did not help)", "glm_rag untrained (dashed)", "dense (dotted)"]
    at5 = paths["recall_by_datamodule_train_fraction_at5.png"]  # issue 52: Recall@5 against training questions too
    assert (
        figure_labels(at5) == labels
        and at5.read_bytes() != paths["recall_by_datamodule_train_fraction.png"].read_bytes()
    )
    with paths["runs.csv"].open() as f:
        rows = {(r["run"], r["system"]): r for r in csv.DictReader(f)}
    assert rows[("glm_f0.5", "glm_f0.5")]["training_did_not_help"] == "True"
    assert rows[("glm_f1.0", "glm_f1.0")]["train_questions"] == "60"


def test_a_study_costs_each_training_job_once(tmp_path):
    """Issue 52: the study's CPU time for planning it on other hardware. A training job files one run per test set
    (and a capacity study copies in a data-scaling run): both carry the job's CPU seconds, which count once."""
    res = tmp_path / "res"
    jobs = {
        "a": ("job1", {"train": 600.0, "evaluation": 120.0}),
        "a_on_dev": ("job1", {"train": 600.0, "evaluation": 120.0}),
    }
    jobs |= {"b": ("job2", {"train": 300.0, "evaluation": 60.0})}
    for name, (folder, cpu) in jobs.items():
        _run(res, name, "glm_rag", 0.4, 0.6, settings={})
        metrics_path = res / name / "metrics.json"
        stored = json.loads(metrics_path.read_text())
        stored["run"] |= {"cpu_seconds": cpu, "output_dir": f"outputs/{folder}"}
        metrics_path.write_text(json.dumps(stored))
    md = build_report(res, tmp_path / "out")["report.md"].read_text()
    assert "CPU time of the study: 15.0 min of training and 3.0 of evaluation in 2 training jobs" in md
