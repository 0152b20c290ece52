"""Every study of ``configs/experiment/study_*.yaml`` run as a user runs it: the toy-scale blocks of docs/studies.md.

Each block of docs/studies.md's "Every study at toy scale on a CPU" runs in bash from an empty folder (with
``train.py`` linked into it), as written: its multiruns train, test and evaluate every run of the
sub-grid, each run files its results-store entry, and ``glmrag.jobs.report`` builds the study's report,
whose table names every run and whose figures carry every run's line.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from glmrag.data.registry import load_dataset
from glmrag.eval.study_plots import figure_labels

ROOT = Path(__file__).resolve().parents[1]
SECTION = ("## Every study at toy scale on a CPU", "\n## ")
STUDIES = sorted(p.stem.removeprefix("study_") for p in (ROOT / "configs" / "experiment").glob("study_*.yaml"))
EVAL_STUDIES = sorted(p.stem for p in (ROOT / "configs" / "eval_study").glob("*.yaml"))

IN_CI = ("data_scaling", "latency", "subgraph_restriction")
"""The studies CI runs through their report (the scaling ablation, the cheapest, GLM-RAG Table 3); the others
share their path and run with ``-m slow`` (minutes each)."""


def readme_blocks() -> tuple[str, dict[str, str]]:
    """The section's shared settings block and each study's block, by the study its report reads."""
    text = (ROOT / "docs" / "studies.md").read_text()
    section = text[text.index(SECTION[0]) :]
    section = section[: section.index(SECTION[1])]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    runs = [b for b in blocks if "train.py" in b or "eval.py" in b]
    shared = [b for b in blocks if b not in runs]
    studies = {re.search(r"glmrag\.jobs\.report results/(\w+)", b).group(1): b for b in runs}
    assert len(shared) == 1, "the section starts with one block of shared settings"
    return shared[0], studies


SHARED, BLOCKS = readme_blocks()


def commands(block: str) -> list[list[str]]:
    """The block's ``train.py`` commands as argument lists: continuation lines joined, and each ``"${NAME[@]}"``
    replaced by the array ``NAME=(...)`` that the shared block or this one defines, as bash expands it."""
    arrays = {name: shlex.split(body) for name, body in re.findall(r"^(\w+)=\((.*?)\)$", SHARED + block, re.S | re.M)}
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        if "train.py" in line:
            tokens = shlex.split(line)
            expanded = [arrays[t[2:-4]] if re.fullmatch(r"\$\{\w+\[@\]\}", t) else [t] for t in tokens]
            out.append([t for part in expanded for t in part])
    return out


def expected_jobs(command: list[str], study: str, train_config) -> int:
    """How many runs the multirun ``command`` launches: the product of its swept values' counts, the study's
    own sweep for every key the command does not set."""
    sweep = dict(train_config([f"experiment=study_{study}", "output_dir=x"], return_hydra_config=True).hydra.sweeper)
    counts = {key: len(str(values).split(",")) for key, values in sweep["params"].items()}
    for token in command:
        key, _, value = token.partition("=")
        if key in counts or ("," in value and not value.startswith(("[", "{"))):
            counts[key] = len(value.split(","))
    return math.prod(counts.values())


@pytest.mark.integration
def test_every_study_has_a_toy_block():
    assert sorted(BLOCKS) == sorted(STUDIES + EVAL_STUDIES)
    for study in STUDIES:
        assert all(c[:4] == ["python", "train.py", "-m", f"experiment=study_{study}"] for c in commands(BLOCKS[study]))
    for study in EVAL_STUDIES:
        assert f"python eval.py eval_study={study} " in BLOCKS[study] and not commands(BLOCKS[study])


def run_block(study: str, cache: Path, folder: Path) -> subprocess.CompletedProcess:
    """The docs/studies.md block of ``study`` after the shared settings, in bash, from ``folder`` (train.py linked)."""
    (folder / "train.py").symlink_to(ROOT / "train.py")
    (folder / "eval.py").symlink_to(ROOT / "eval.py")
    python = Path(sys.executable).parent  # the blocks' `python` is this interpreter
    env = os.environ | {"GLMRAG_CACHE_DIR": str(cache), "PATH": f"{python}:{os.environ['PATH']}"}
    script = f"{SHARED}\n{BLOCKS[study]}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, f"exit code {done.returncode}\n{done.stderr[-6000:]}"
    return done


@pytest.mark.parametrize(
    "study", [pytest.param(s, marks=pytest.mark.integration if s in IN_CI else pytest.mark.slow) for s in STUDIES]
)
def test_study_runs_through_its_report(study, glmrag_cache, tmp_path, train_config):
    block = BLOCKS[study]
    if "2wiki" in block:
        try:
            load_dataset("2wiki_dev", split="test", limit=1)
        except (FileNotFoundError, OSError) as err:
            pytest.skip(f"the transfer study's second dataset is not on this machine: {err}")
    done = run_block(study, glmrag_cache, tmp_path)

    launched = [int(n) for n in re.findall(r"Launching (\d+) jobs locally", done.stdout + done.stderr)]
    assert launched == [expected_jobs(c, study, train_config) for c in commands(block)]
    jobs = sorted(p for p in (tmp_path / "outputs" / "multirun" / study).glob("*/*") if (p / ".hydra").is_dir())
    assert len(jobs) == sum(launched)

    entries = [json.loads(p.read_text()) for p in (tmp_path / "results" / study).glob("*/metrics.json")]
    eval_sets = len(re.search(r"eval_data=\[([^]]*)\]", block).group(1).split(",")) if "eval_data=" in block else 1
    assert len(entries) == len(jobs) * eval_sets  # every run filed once per test set
    assert sorted({Path(e["run"]["output_dir"]).resolve() for e in entries}) == [j.resolve() for j in jobs]
    assert all(e["run"]["study"] == study and e["reference"] in e["overall"] for e in entries)
    assert all(e["run"]["cpu_seconds"]["train"] > 0 and e["run"]["cpu_seconds"]["evaluation"] > 0 for e in entries)
    run_ids = sorted(p.parent.name for p in (tmp_path / "results" / study).glob("*/metrics.json"))

    report = tmp_path / "results" / study / "report"
    table = (report / "report.md").read_text()
    runs_csv = (report / "runs.csv").read_text()
    for run_id in run_ids:
        assert run_id in table and run_id in runs_csv, run_id
    assert "CPU min (train + eval)" in table
    if study == "data_scaling":  # each family trained on two numbers of questions: its gain per doubling
        assert "Recall@2 per doubling of training questions" in table and "slope per doubling" in table
    figures = sorted(report.glob("*.png"))
    assert figures, "the report drew no figure"
    families = {e["run"]["family"] for e in entries}
    for figure in figures:
        labels = set(figure_labels(figure))
        if figure.stem in ("recall_by_hops", "recall_by_n_supporting"):  # one line per run, baselines dashed
            assert {label for label in labels if not label.endswith("(dashed)")} == set(run_ids), figure.name
        else:  # scaling.png, recall_by_<swept key>.png: one line per family (its label may say training did not
            # help), each run's untrained model beside them (these toy runs have no dense baseline to draw)
            assert families <= {label.split(" (")[0] for label in labels}, figure.name
            assert any(label.endswith(" untrained (dashed)") for label in labels), figure.name


@pytest.mark.parametrize(  # the offline SmolLM2 reads, routes and rewrites
    "study",
    [  # DTKG's SmolLM2 run end to end is tests/retrievers/test_dtkg_retriever.py's; its study report: -m slow
        pytest.param(s, marks=pytest.mark.slow if s == "dtkg" else pytest.mark.llm) for s in EVAL_STUDIES
    ],
)
def test_eval_study_runs_through_its_report(study, glmrag_cache, tmp_path):
    run_block(study, glmrag_cache, tmp_path)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        systems = list(compose("eval", [f"eval_study={study}", "output_dir=x"]).retriever)
    (path,) = (tmp_path / "results" / study).glob("*/metrics.json")
    entry = json.loads(path.read_text())
    assert entry["systems"] == systems and entry["reference"] == study
    report = tmp_path / "results" / study / "report"
    table = (report / "report.md").read_text()
    assert all(f"| {system}" in table for system in systems)
    drawn = [n for n in ("recall_by_hops.png", "recall_by_n_supporting.png") if (report / n).exists()]
    assert drawn[0] == "recall_by_hops.png"  # n_supporting only where it differs from hops (not on MuSiQue)
    for name in drawn:  # the run solid, its baselines dashed
        labels = {label.removesuffix(" (dashed)") for label in figure_labels(report / name)}
        assert labels == {path.parent.name, *systems[1:]}, name
