"""Training throughput of GFM-RAG+ and the GLM on one GPU: questions/s, peak memory, validation Recall@2.

Each system trains for ``--steps`` optimizer steps on the embedded MuSiQue-100 training questions
through the project's own training job (:func:`glmrag.jobs.train.fit`: the Hydra config of its
experiment, the DataModule, the LightningModule and the Lightning Trainer, one device, bf16-mixed),
with validation and checkpoints off while it is timed. A callback (:class:`ThroughputMeter`) takes
the wall time from the end of step ``--warmup`` to the end of the last step (CUDA synchronised), so
data loading, the optimizer and the Trainer's own work are included, and reads
``torch.cuda.max_memory_allocated`` over the run. A ``Trainer.validate`` on the 20 validation
questions then gives ``val/recall@2`` (a handful of steps from scratch: a check that the trained
model ranks, not a quality figure).

Systems (``--systems``):

- ``gfm_rag_plus``: experiment ``gfm_rag_plus`` (GLM-RAG App. B.1: hidden 512, 6 layers, text node
  features), global batch 4 (Table 14);
- ``glm_rag``: experiment ``glm_rag`` (Table 14 / App. C: global GLM, 2 hops, 600 triplets, batch 2).
  Its T5 is ``--t5`` where that model is installed (``t5-base`` is the paper's); by default, with no
  model hub, a randomly initialised T5 of t5-small's sizes (:data:`T5_SMALL`) reading the subgraphs
  with the offline MiniLM tokenizer (the cost of a forward does not depend on the weights' values).

    python benchmarks/gpu_train_throughput.py                                 # one GPU, both systems
    python benchmarks/gpu_train_throughput.py --t5 t5-base --backend flex     # where t5-base is installed
    python benchmarks/gpu_train_throughput.py --device cpu --steps 2 --tiny   # smoke test without a GPU

Writes ``--out`` (JSON; temporary file, then renamed) and prints it.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf

from glmrag.io import atomic_write_text
from glmrag.jobs.train import fit, num_parameters

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu_train_throughput.json"
SYSTEMS = ("gfm_rag_plus", "glm_rag")
T5_SMALL = {"d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8, "d_kv": 64}
"""t5-small's encoder sizes (Raffel et al. 2020; the smallest GLM of GLM-RAG Table 18)."""
OFFLINE_TOKENIZER = "offline:all-MiniLM-L6-v2"
TINY = {
    "gfm_rag_plus": {"model.hidden_channels": 8, "model.num_layers": 1},
    "glm_rag": {
        "model.t5_config": {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_heads": 2, "d_kv": 8},
        "model.max_triplets": 30,
    },
}
"""``--tiny``: model sizes for the CPU smoke test (the code path, not a measurement)."""


class ThroughputMeter(Callback):
    """Questions per second of training steps ``warmup + 1 ... last`` and the peak device memory of the run."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.steps = 0
        self.questions = 0
        self.start: float | None = None
        self.seconds: float | None = None
        self.peak_gib: float | None = None

    @staticmethod
    def _sync(trainer: L.Trainer) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize(trainer.strategy.root_device)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        self._sync(trainer)
        self.steps += 1
        if self.steps == self.warmup:
            self.start = time.perf_counter()
        elif self.steps > self.warmup:
            self.questions += len(batch["question_ids"])
            self.seconds = time.perf_counter() - self.start

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.strategy.root_device.type == "cuda":
            self.peak_gib = torch.cuda.max_memory_allocated(trainer.strategy.root_device) / 2**30

    def result(self) -> dict[str, Any]:
        if not self.seconds or not self.questions:
            raise RuntimeError(f"no timed step: {self.steps} steps ran, {self.warmup} of them warm-up; raise --steps")
        return {
            "timed_steps": self.steps - self.warmup,
            "timed_questions": self.questions,
            "seconds": round(self.seconds, 4),
            "questions_per_s": round(self.questions / self.seconds, 3),
            "peak_gib": None if self.peak_gib is None else round(self.peak_gib, 3),
        }


def system_config(system: str, args: argparse.Namespace, workdir: Path) -> DictConfig:
    """The training config of ``system``: its experiment on ``--data``, one device, no validation or checkpoints."""
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        overrides = [f"experiment={system}", "data=musique100", f"data.name={args.data}", f"seed={args.seed}"]
        cfg = compose("train", overrides)
    OmegaConf.set_struct(cfg, False)
    gpu = args.device == "cuda"
    cfg.output_dir = str(workdir / system)
    cfg.checkpoint_dir = str(workdir / system / "checkpoints")
    cfg.results_dir = str(workdir / "results")
    cfg.logger = None
    cfg.callbacks = {"throughput": {"_target_": f"{__name__}.ThroughputMeter", "warmup": args.warmup}}
    cfg.data.limit = args.limit
    cfg.index.update(embed_model=OFFLINE_TOKENIZER, embed_dim=384)  # offline MiniLM, not the paper configs' hub mpnet
    cfg.datamodule.num_workers = args.workers
    cfg.trainer.update(
        accelerator="gpu" if gpu else "cpu",
        devices=1,
        precision=args.precision,
        max_epochs=-1,
        max_steps=args.steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    if system == "glm_rag":
        cfg.model.backend = args.backend
        if args.t5:
            cfg.model.update(t5=args.t5, t5_config=None, tokenizer=args.t5)
        else:
            cfg.model.update(t5_config=dict(T5_SMALL), tokenizer=OFFLINE_TOKENIZER)
    for key, value in (TINY[system] if args.tiny else {}).items():
        OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def measure(system: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Train ``system`` for ``args.steps`` steps, then validate; one row of the JSON."""
    cfg = system_config(system, args, workdir)
    L.seed_everything(cfg.seed, workers=True)
    trainer, callbacks = fit(cfg, loggers=[])
    meter = next(cb for cb in callbacks if isinstance(cb, ThroughputMeter))
    timing = meter.result()
    model, datamodule = trainer.lightning_module, trainer.datamodule
    validator = L.Trainer(
        accelerator=cfg.trainer.accelerator,
        devices=1,
        precision=cfg.trainer.precision,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    (scores,) = validator.validate(model, datamodule=datamodule, verbose=False)
    keys = ("hidden_channels", "num_layers", "t5", "t5_config", "tokenizer", "max_triplets", "backend")
    settings = {key: cfg.model[key] for key in keys if cfg.model.get(key) is not None}
    if settings.get("t5_config"):  # a random T5 of these sizes replaces model.t5
        settings["t5"] = "random"
    return {
        "system": system,
        "model": {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in settings.items()},
        "num_parameters": num_parameters(model),
        "global_batch": int(cfg.datamodule.batch_size),
        "steps": args.steps,
        "warmup_steps": args.warmup,
        **timing,
        "val_recall@2": round(float(scores["val/recall@2"]), 4),
        "val_questions": len(datamodule.split_questions(cfg.data.name, "val_split")),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per system, warm-up included")
    parser.add_argument("--warmup", type=int, default=None, help="untimed first steps (default: min(10, steps // 2))")
    parser.add_argument("--precision", default="bf16-mixed", help="Trainer precision (bf16-mixed, 32-true, ...)")
    parser.add_argument("--t5", default=None, help="a pretrained T5 for the GLM (t5-base); default: random t5-small")
    parser.add_argument("--backend", default="eager", choices=["eager", "flex"], help="the GLM's attention kernel")
    parser.add_argument("--data", default="musique100", help="a registry dataset with OpenIE triples")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each split (default: all)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="tiny models: a smoke test of the code path")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    if args.warmup is None:
        args.warmup = min(10, args.steps // 2)
    if not 0 < args.warmup < args.steps:
        parser.error(f"need 0 < --warmup < --steps, got warmup {args.warmup}, steps {args.steps}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: run with --device cpu (a smoke test) on a machine without a GPU")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_float32_matmul_precision("high")
    with tempfile.TemporaryDirectory(prefix="gpu_train_throughput-") as workdir:
        runs = [measure(system, args, Path(workdir)) for system in args.systems]
    result = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({platform.processor() or 'cpu'})",
        "precision": args.precision,
        "data": args.data if args.limit is None else f"{args.data} (first {args.limit} per split)",
        "torch": torch.__version__,
        "runs": runs,
    }
    text = json.dumps(result, indent=2)
    print(text)
    atomic_write_text(args.out, text + "\n")
    return result


if __name__ == "__main__":
    main()
