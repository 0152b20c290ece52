"""Two runs of the main job's recipe (and of the GFM-RAG+ demo) on one machine print the same table (issue: README
numbers must be reproducible). The recipe runs on musique100 (experiment=demo_prior), whose index the integration
tests build once: the README's experiment=demo_2wiki is the same code on the embedded 2Wiki slice, whose index would
add two minutes to CI (its table from a clean clone: benchmarks/RESULTS.md, "The main job").

Each run is its own ``python train.py`` process, as a user runs it, reading the session's index cache (the
musique100 index and passage embeddings the integration tests build once; both runs read the same index, as a
rerun does). Two epochs instead of the README's five keep the test short; the code path (seeded split, seeded
DataLoader order, training, testing the best checkpoint, evaluating against dense and PPR) is the main job's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def main_job(tmp_path: Path, name: str, cache: Path, experiment: str) -> dict:
    out = tmp_path / name
    overrides = [
        f"experiment={experiment}",
        "trainer.max_epochs=2",
        "logger=[csv]",
        f"output_dir={out}",
        f"checkpoint_dir={out / 'ckpt'}",
        f"results_dir={out / 'res'}",
        f"hydra.run.dir={out / 'hydra'}",
    ]
    env = {**os.environ, "GLMRAG_CACHE_DIR": str(cache), "GLMRAG_QUIET": "1"}
    subprocess.run([sys.executable, "train.py", *overrides], cwd=ROOT, env=env, check=True, timeout=1800)
    return json.loads((out / "eval" / "metrics.json").read_text())


@pytest.mark.parametrize(
    "experiment",
    [
        pytest.param("demo_prior", marks=pytest.mark.integration),  # the main job's recipe: two musique100 runs
        pytest.param("demo", marks=pytest.mark.slow),  # the same path with another model
    ],
)
def test_two_runs_of_the_main_job_give_identical_metrics(tmp_path, glmrag_cache, experiment):
    first = main_job(tmp_path, "a", glmrag_cache, experiment)
    second = main_job(tmp_path, "b", glmrag_cache, experiment)
    assert first["systems"] == second["systems"]
    assert first["overall"] == second["overall"]  # every metric, mean and CI, of every system, bit for bit
    assert first["significance"] == second["significance"]
