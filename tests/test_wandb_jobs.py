"""wandb in training jobs, offline: one run per job, WANDB_MODE honoured, tables and the best checkpoint kept."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from glmrag.jobs.loggers import resolve_wandb_mode
from glmrag.jobs.train import run_train
from glmrag.models.gnn_module import GNNRetrieverModule

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = ["index.embed_model=offline:all-MiniLM-L6-v2", "index.embed_dim=384"]  # the paper configs name mpnet
TINY = ["model.gnn.hidden_channels=8", "model.gnn.num_layers=1", "data.limit=8", "logger=[wandb]", "n_boot=50"]
TINY += OFFLINE


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No wandb credentials and no WANDB_MODE: the logger's ``auto`` mode resolves to offline."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_SILENT", "true")


def job(tmp_path: Path, name: str, overrides: list[str]) -> dict:
    paths = [f"output_dir={tmp_path / name}", f"checkpoint_dir={tmp_path / name / 'ckpt'}"]
    paths.append(f"results_dir={tmp_path / 'res'}")
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*TINY, *paths, *overrides])
    return run_train(cfg)


def run_ids(folder: Path) -> list[str]:
    """Ids of the offline wandb runs written under ``folder`` (``offline-run-<time>-<id>``)."""
    return sorted(p.name.rsplit("-", 1)[1] for p in folder.glob("wandb/offline-run-*"))


@pytest.mark.integration  # two musique100 training jobs
def test_each_job_in_one_process_logs_its_own_run_with_tables_and_checkpoint(glmrag_cache, tmp_path, offline):
    first = job(tmp_path, "a", ["experiment=demo", "trainer.max_epochs=1", "retriever@baselines=[ppr]"])
    job(tmp_path, "b", ["experiment=demo", "+trainer.fast_dev_run=true"])  # jobs 2..N of a multirun
    (a,), (b,) = run_ids(tmp_path / "a"), run_ids(tmp_path / "b")
    assert a != b

    files = next((tmp_path / "a" / "wandb").glob("offline-run-*")) / "files"
    best = Path(first["best_checkpoint"])
    assert (files / "checkpoints" / best.name).read_bytes() == best.read_bytes()  # offline: a copy in the run
    table = json.loads(next(files.glob("media/table/eval/table_*.table.json")).read_text())
    assert table["columns"][:3] == ["system", "reference", "recall@1"]
    assert [row[0] for row in table["data"]] == ["gfm_rag_plus_demo-musique100", "untrained", "ppr"]
    rankings = json.loads(next(files.glob("media/table/eval/rankings_*.table.json")).read_text())
    n_test = len(first["eval"].question_ids)
    assert len(rankings["data"]) == 3 * n_test and rankings["columns"][:3] == ["system", "question_id", "top_passages"]


@pytest.mark.integration  # KG-completion pretraining, then fine-tuning, on musique100
def test_fine_tuning_after_kg_completion_pretraining_logs_its_own_run(glmrag_cache, tmp_path, offline):
    job(tmp_path, "g", ["experiment=gfm_rag", "+trainer.fast_dev_run=true", "evaluate=false"])
    (pre,), (fine,) = run_ids(tmp_path / "g" / "pretrain"), run_ids(tmp_path / "g")
    assert pre != fine


@pytest.fixture(scope="module")
def failed_then_next(glmrag_cache, tiny_musique, tmp_path_factory):
    """Two jobs in one process, wandb offline: the first dies inside ``Trainer.fit``, the second trains one
    epoch on musique_tiny and is evaluated against PPR. Returns the folder, the second job's result, whether a
    wandb run was still active between the two jobs, and each job's run summary as it was closed."""
    wandb = pytest.importorskip("wandb")
    from lightning.pytorch.loggers import WandbLogger

    import glmrag.jobs.loggers

    summaries = []
    close = glmrag.jobs.loggers.close_loggers

    def closing_with_summary(loggers, status="success"):
        runs = [lg.experiment for lg in loggers if isinstance(lg, WandbLogger)]
        summaries.extend({key: run.summary[key] for key in run.summary.keys()} for run in runs)
        close(loggers, status)

    tmp_path = tmp_path_factory.mktemp("jobs")
    tiny = [f"data.name={tiny_musique}", "logger=[csv,wandb]", "retriever@baselines=[ppr]"]

    def fail(self):
        raise RuntimeError("injected: the first job dies inside Trainer.fit")

    with pytest.MonkeyPatch.context() as mp:
        for name in ("WANDB_API_KEY", "WANDB_MODE"):
            mp.delenv(name, raising=False)
        mp.setenv("HOME", str(tmp_path / "home"))
        mp.setenv("WANDB_SILENT", "true")
        mp.setattr(glmrag.jobs.loggers, "close_loggers", closing_with_summary)
        with pytest.MonkeyPatch.context() as broken:
            broken.setattr(GNNRetrieverModule, "on_train_start", fail)
            with pytest.raises(RuntimeError, match="injected"):
                job(tmp_path, "failed", [*tiny, "+trainer.fast_dev_run=true"])
        left_active = wandb.run is not None
        result = job(tmp_path, "next", [*tiny, "trainer.max_epochs=1"])  # a Hydra multirun's next job
    return tmp_path, result, left_active, summaries


def test_a_failed_job_finishes_its_run_and_the_next_job_gets_its_own(failed_then_next):
    wandb = pytest.importorskip("wandb")
    tmp_path, _, left_active, _ = failed_then_next
    assert not left_active  # the failed job's run is finished, not left active for the next job
    assert (tmp_path / "failed" / "csv" / "version_0" / "hparams.yaml").is_file()  # the CSV logger saved too
    (failed,), (following,) = run_ids(tmp_path / "failed"), run_ids(tmp_path / "next")
    assert failed != following and wandb.run is None


def test_the_run_summary_holds_the_final_metrics(failed_then_next):
    """wandb offline runs had no final metrics outside the binary history: the summary holds them."""
    _, result, _, summaries = failed_then_next
    summary = summaries[-1]  # the job that trained; the failed one's summary is empty
    assert summary["test/recall@2"] == pytest.approx(result["metrics"]["test/recall@2"])
    assert summary["eval/recall@2"] == pytest.approx(result["eval"].overall[result["eval"].reference]["recall@2"].mean)
    assert summary["best_checkpoint"] == result["best_checkpoint"]


def test_evaluation_figures_are_logged_as_images(failed_then_next):
    tmp_path, result, _, _ = failed_then_next
    pngs = {p.stem: p for p in (tmp_path / "next" / "eval").glob("*.png")}
    assert sorted(pngs) == ["recall_by_hops"]  # MuSiQue: hops = supporting passages, so one figure for both
    files = next((tmp_path / "next" / "wandb").glob("offline-run-*")) / "files"
    images = {p.name.rsplit("_", 2)[0]: p for p in (files / "media" / "images" / "eval").glob("*.png")}
    assert sorted(images) == sorted(pngs)  # <key>_<step>_<hash>.png under the key eval/<figure>
    for stem, image in images.items():
        assert image.read_bytes().startswith(b"\x89PNG") and image.read_bytes() == pngs[stem].read_bytes()
    assert result["eval"].breakdowns["hops"]  # what the figures draw


def test_wandb_mode_environment_is_honoured(monkeypatch, offline):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_wandb_mode("auto") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "dryrun")  # wandb's old name for offline
    assert resolve_wandb_mode("auto") == "offline"
    assert resolve_wandb_mode("online") == "online"  # a mode written in the config is kept
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(ValueError, match="got 'sometimes'"):
        resolve_wandb_mode("auto")


def test_a_disabled_run_writes_no_wandb_files(glmrag_cache, tiny_musique, tmp_path, offline, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    job(tmp_path, "d", ["experiment=demo", "+trainer.fast_dev_run=true", f"data.name={tiny_musique}"])
    assert not list((tmp_path / "d").rglob("offline-run-*")) and not list((tmp_path / "d").rglob("run-*"))
