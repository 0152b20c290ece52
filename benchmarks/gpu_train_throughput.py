"""Training throughput of GFM-RAG+ and the GLM on one GPU: questions/s, peak memory, validation Recall@2.

Each system trains for ``--steps`` optimizer steps with the project's Hydra config of its experiment
(``experiment=<system>``, with ``trainer=gpu`` on the GPU: one device, ``bf16-mixed``), its
LightningModule and the Lightning Trainer, with validation and checkpoints off while it is timed. A
callback (:class:`ThroughputMeter`) takes the wall time from the end of step ``--warmup`` to the end of
the last step (CUDA synchronised), so data loading, the optimizer and the Trainer's own work are
included, and reads ``torch.cuda.max_memory_allocated`` over the run. A ``Trainer.validate`` on the
validation questions then gives ``val/recall@2`` (a handful of steps from scratch: a check that the
trained model ranks, not a quality figure).

Data (``--data``):

- a registry dataset with OpenIE triples (default ``musique100``, the embedded MuSiQue-100): the whole
  training job (:func:`glmrag.jobs.train.fit`: its DataModule builds the KG index and the subgraph
  chunks, which needs spaCy and the offline MiniLM);
- ``synthetic`` (GLM only): no index build, no spaCy, no model files, so it runs on a bare GPU machine
  (``benchmarks/gpu_check.sh``). A power-law KG of the 2Wiki test KG's size
  (:func:`glmrag.index.synthetic.power_law_index`; GLM-RAG Table 11) whose entity and relation names are
  runs of 2-4 made-up words, read by a word-level tokenizer built over those words (saved in a
  temporary folder), so a 600-triplet subgraph has about as many tokens as GLM-RAG Table 7's 3,300;
  questions with 1-4 random seeds and gold passages that mention a neighbour of a seed; random question
  embeddings. The experiment's model, subgraph settings (:func:`question_record`), collate
  (:class:`GLMCollate`, in ``--workers`` DataLoader workers), optimizer and Trainer are the training
  job's; only the records come from memory instead of LitData chunks. The JSON records the token counts.

Systems (``--systems``):

- ``gfm_rag_plus``: experiment ``gfm_rag_plus`` (GLM-RAG App. B.1: hidden 512, 6 layers, text node
  features), global batch 4 (Table 14); registry data only;
- ``glm_rag``: experiment ``glm_rag`` (Table 14 / App. C: global GLM, 2 hops, 600 triplets, batch 2),
  once per ``--backend``. Its T5 is ``--t5`` where that model is installed (``t5-base`` is the paper's);
  else a randomly initialised T5 of ``--t5-size`` (default t5-small's sizes, :data:`T5_SMALL`; the cost
  of a step does not depend on the weights' values) reading the subgraphs with the offline MiniLM
  tokenizer (registry data) or the synthetic one.

Sizes (``--size``): ``full`` (:data:`DEFAULTS`: the registry data, 60 steps, t5-small's sizes),
``check`` (what ``gpu_check.sh`` times: synthetic data, the GLM at t5-large's sizes, eager and flex, 12
steps of which 4 warm-up) and ``dry`` (the same on the CPU with tiny models, two steps: the code path).
Flags given override the preset.

    python benchmarks/gpu_train_throughput.py                                 # one GPU, both systems
    python benchmarks/gpu_train_throughput.py --t5 t5-base --backend flex     # where t5-base is installed
    python benchmarks/gpu_train_throughput.py --size check --out $OUT/train_throughput.json   # bare GPU
    python benchmarks/gpu_train_throughput.py --device cpu --steps 2 --tiny   # smoke test without a GPU

Writes ``--out`` (JSON; temporary file, then renamed; rewritten after every run) and prints it. A run
that fails records its error in ``errors`` and the next one goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from gpu_common import stop_on_sigterm
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader

from glmrag.data.types import Question
from glmrag.datamodules.glm_inputs import GLMCollate, SubgraphSettings, load_tokenizer, question_record
from glmrag.index.kg import EntityLink, KGIndex
from glmrag.index.synthetic import power_law_index
from glmrag.io import atomic_write_text
from glmrag.nn.flex_attention import cpu_flex_backward

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu_train_throughput.json"
SYSTEMS = ("gfm_rag_plus", "glm_rag")
SYNTHETIC = "synthetic"
T5_SMALL = {"d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8, "d_kv": 64}
"""t5-small's encoder sizes (Raffel et al. 2020; the smallest GLM of GLM-RAG Table 18)."""
T5_SIZES = {
    "t5-small": T5_SMALL,
    "t5-base": {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12, "d_kv": 64},
    "t5-large": {"d_model": 1024, "d_ff": 4096, "num_layers": 24, "num_heads": 16, "d_kv": 64},
}
"""Encoder sizes of the random T5 (``--t5-size``)."""
T5_VOCAB = 32128
"""T5's vocabulary size: the synthetic runs keep T5's embedding table (and its AdamW state) at full size."""
OFFLINE_TOKENIZER = "offline:all-MiniLM-L6-v2"
TINY = {
    "gfm_rag_plus": {"model.gnn.hidden_channels": 8, "model.gnn.num_layers": 1},
    "glm_rag": {
        "model.glm.encoder_config": {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_heads": 2, "d_kv": 8},
        "model.subgraph.max_triplets": 30,
    },
}
"""``--tiny``: model sizes for the CPU smoke test (the code path, not a measurement)."""
KG_SIZES = {"2wiki": (48_779, 160_950, 20_748, 6_119), "small": (2_000, 8_000, 100, 300)}
"""Synthetic KG sizes (entities, triples, relations, passages): the 2Wiki test KG (GLM-RAG Table 11), tiny."""
DEFAULTS: dict[str, Any] = {
    "systems": None,  # every system the data offers
    "steps": 60,
    "precision": "bf16-mixed",
    "backend": ["eager"],
    "data": "musique100",
    "workers": 0,
    "t5_size": "t5-small",
    "tiny": False,
    "kg": "2wiki",
    "val_questions": 20,
}
SIZES: dict[str, dict[str, Any]] = {
    "full": {},
    "check": {"data": SYNTHETIC, "t5_size": "t5-large", "steps": 12, "warmup": 4, "backend": ["eager", "flex"]}
    | {"workers": 4},
    "dry": {"data": SYNTHETIC, "tiny": True, "steps": 2, "warmup": 1, "backend": ["eager", "flex"], "kg": "small"}
    | {"val_questions": 4},
}
"""``--size`` presets (module docstring); a flag given on the command line overrides its value."""


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


# -- synthetic GLM inputs (no index build, no spaCy, no model files) --


def made_up_names(count: int, words: int, lengths: tuple[int, int], rng: np.random.Generator, prefix: str) -> list[str]:
    """``count`` distinct names of ``lengths[0]..lengths[1]`` words out of ``words`` (``<prefix><k>``): the first
    two words spell the index in base ``words`` (so names are unique), the rest are drawn."""
    names = []
    for i in range(count):
        extra = rng.integers(0, words, int(rng.integers(lengths[0], lengths[1] + 1)) - 2)
        digits = [i // words, i % words, *extra.tolist()]
        names.append(" ".join(f"{prefix}{d}" for d in digits))
    return names


def synthetic_kg(size: str, seed: int = 0) -> tuple[KGIndex, list[str]]:
    """A power-law KG of :data:`KG_SIZES` ``size`` with made-up multi-word names, and its vocabulary."""
    entities, triples, relations, passages = KG_SIZES[size]
    rng = np.random.default_rng(seed)
    words = 1 + int(max(entities, relations) ** 0.5)  # base of the first two words: every index fits
    index = power_law_index(entities, triples, relations, passages, seed=seed)
    index = dataclasses.replace(
        index,
        entities=made_up_names(entities, words, (2, 4), rng, "e"),
        relations=made_up_names(relations, words, (2, 4), rng, "r"),
    )
    vocabulary = [f"{prefix}{k}" for prefix in ("e", "r") for k in range(words)] + ["which", "is", "of", "?"]
    return index, vocabulary


def synthetic_tokenizer(vocabulary: list[str], folder: Path) -> str:
    """A word-level tokenizer over ``vocabulary`` with T5's special ids (pad 0, ``</s>`` 1), saved to ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "</s>", "<unk>"]
    model = models.WordLevel({token: i for i, token in enumerate(specials + vocabulary)}, unk_token="<unk>")
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(str(folder))
    return str(folder)


def synthetic_questions(index: KGIndex, count: int, seed: int, prefix: str) -> list[Question]:
    """``count`` questions with 1-4 seeds of positive degree (linked in ``index.question_links``) whose gold
    passages mention a neighbour of a seed (so their subgraphs hold target entities)."""
    rng = np.random.default_rng(seed)
    heads, tails = index.triples[:, 0], index.triples[:, 2]
    connected = np.unique(np.concatenate([heads, tails]))
    mentioned = index.entity_passages.tocsr()
    questions = []
    for i in range(count):
        qid = f"{prefix}{i}"
        seeds = rng.choice(connected, int(rng.integers(1, 5)), replace=False)
        index.question_links[qid] = [EntityLink(index.entities[s], int(s), 1.0) for s in seeds]
        neighbours = np.concatenate([tails[np.isin(heads, seeds)], heads[np.isin(tails, seeds)]])
        gold = []
        for entity in rng.choice(neighbours, min(2, len(neighbours)), replace=False) if len(neighbours) else seeds[:1]:
            passages = mentioned[int(entity)].indices
            gold.append(index.passage_ids[int(passages[0])])
        text = f"which {index.entities[seeds[0]]} is of {' '.join(index.entities[s] for s in seeds[1:])} ?"
        questions.append(Question(qid, text, ("a",), tuple(dict.fromkeys(gold))))
    return questions


class SyntheticSubgraphs(L.LightningDataModule):
    """GLM records of a synthetic KG in memory, batched by :class:`GLMCollate` as ``SubgraphDataModule`` does.

    It offers what :class:`~glmrag.models.glm_module.GLMRetrieverModule` reads from a DataModule: ``index(kg)``
    (for ranking passages) and ``settings`` (checked against the module's).
    """

    def __init__(
        self,
        kg: KGIndex,
        records: dict[str, list[dict[str, Any]]],
        settings: SubgraphSettings,
        batch_size: int,
        workers: int,
    ) -> None:
        super().__init__()
        self.kg, self.records, self.settings = kg, records, settings
        self.batch_size, self.workers = batch_size, workers
        self.collate = GLMCollate(settings.position_mode, position_conflict=settings.position_conflict)

    def index(self, kg: str) -> KGIndex:
        return self.kg

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.records[split],
            batch_size=self.batch_size,
            shuffle=shuffle,
            collate_fn=self.collate,
            num_workers=self.workers,
            persistent_workers=self.workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)


def synthetic_datamodule(cfg, args: argparse.Namespace, workdir: Path) -> tuple[SyntheticSubgraphs, dict[str, Any]]:
    """The DataModule of a synthetic run (the module docstring) and a summary of its inputs for the JSON."""
    start = time.perf_counter()
    kg, vocabulary = synthetic_kg(args.kg, seed=args.seed)
    tokenizer = load_tokenizer(synthetic_tokenizer(vocabulary, workdir / "tokenizer"))
    settings = SubgraphSettings(**cfg.model.subgraph)
    batch = int(cfg.datamodule.batch_size)
    dim = int(cfg.model.glm.question_dim)
    rng = np.random.default_rng(args.seed)
    records: dict[str, list[dict[str, Any]]] = {}
    for offset, (split, count) in enumerate((("train", args.steps * batch), ("val", args.val_questions)), start=1):
        records[split] = []
        for question in synthetic_questions(kg, count, seed=args.seed + offset, prefix=f"{split}-"):
            emb = rng.standard_normal(dim).astype(np.float32)
            records[split].append(
                question_record(kg, question, SYNTHETIC, tokenizer, settings, emb / np.linalg.norm(emb))
            )
    tokens = np.array([r["num_tokens"] for r in records["train"]])
    triples = np.array([r["num_triples"] for r in records["train"]])
    summary = {
        "source": f"synthetic: power_law_index{KG_SIZES[args.kg]}, made-up names, word-level tokenizer",
        "train_questions": len(records["train"]),
        "tokens_mean": round(float(tokens.mean()), 1),
        "tokens_min": int(tokens.min()),
        "tokens_max": int(tokens.max()),
        "triplets_mean": round(float(triples.mean()), 1),
        "build_s": round(time.perf_counter() - start, 2),
    }
    return SyntheticSubgraphs(kg, records, settings, batch, args.workers), summary


# -- configs and runs --


def system_config(system: str, args: argparse.Namespace, workdir: Path, backend: str = "eager"):
    """The training config of ``system``: its experiment (``trainer=gpu`` on the GPU), one device, no validation
    or checkpoints while timed."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import glmrag.jobs.config_path  # noqa: F401  (the configs' resolvers and schemas)

    gpu = args.device == "cuda"
    data = "musique100" if args.data == SYNTHETIC else args.data
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        overrides = [f"experiment={system}", "data=musique100", f"data.name={data}", f"seed={args.seed}"]
        cfg = compose("train", [*overrides, f"trainer={'gpu' if gpu else 'cpu'}"])
    OmegaConf.set_struct(cfg, False)
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
        cfg.model.glm.backend = backend
        if args.t5:
            cfg.model.glm.update(encoder=args.t5, encoder_config=None, tokenizer=args.t5)
        else:
            t5_config = dict(T5_SIZES[args.t5_size]) | ({"vocab_size": T5_VOCAB} if args.data == SYNTHETIC else {})
            cfg.model.glm.update(encoder_config=t5_config, tokenizer=OFFLINE_TOKENIZER)
    for key, value in (TINY[system] if args.tiny else {}).items():
        OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def train(
    cfg, args: argparse.Namespace, workdir: Path, cache: dict[str, Any]
) -> tuple[L.Trainer, Any, dict[str, Any] | None]:
    """Fit ``cfg`` as the training job does; returns the Trainer, the DataModule and the synthetic inputs' summary
    (the synthetic DataModule is built once, in ``cache``, and shared by the runs of every backend)."""
    if args.data != SYNTHETIC:
        from glmrag.jobs.train import fit  # the whole job: index build and subgraph shards (spaCy, MiniLM)

        trainer, _ = fit(cfg, loggers=[])
        return trainer, trainer.datamodule, None
    from hydra.utils import instantiate

    if "datamodule" not in cache:
        cache["datamodule"] = synthetic_datamodule(cfg, args, workdir)
    datamodule, summary = cache["datamodule"]
    cfg.model.glm.tokenizer = str(workdir / "tokenizer")
    # As glmrag.jobs.train.fit, with the synthetic DataModule in place of cfg.datamodule:
    model = instantiate(cfg.model, kgs=datamodule)
    callbacks = [instantiate(node) for node in cfg.callbacks.values()]
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=False)
    trainer.fit(model, datamodule=datamodule)
    return trainer, datamodule, summary


def measure(
    system: str, args: argparse.Namespace, workdir: Path, backend: str = "eager", cache: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Train ``system`` for ``args.steps`` steps, then validate; one row of the JSON."""
    from omegaconf import OmegaConf

    cfg = system_config(system, args, workdir, backend)
    L.seed_everything(cfg.seed, workers=True)
    trainer, datamodule, inputs = train(cfg, args, workdir, {} if cache is None else cache)
    meter = next(cb for cb in trainer.callbacks if isinstance(cb, ThroughputMeter))
    timing = meter.result()
    model = trainer.lightning_module
    validator = L.Trainer(
        accelerator=cfg.trainer.accelerator,
        devices=1,
        precision=cfg.trainer.precision,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    (scores,) = validator.validate(model, datamodule=datamodule, verbose=False)
    keys = ("gnn.hidden_channels", "gnn.num_layers", "glm.encoder", "glm.encoder_config", "glm.tokenizer")
    keys += ("subgraph.max_triplets", "glm.backend")
    settings = {
        key.rpartition(".")[2]: OmegaConf.select(cfg.model, key)
        for key in keys
        if OmegaConf.select(cfg.model, key) is not None
    }
    if settings.get("encoder_config"):  # a random T5 of these sizes replaces model.glm.encoder
        settings["encoder"] = "random"
    if inputs is not None:
        settings["tokenizer"] = "synthetic word-level"
        val_questions = len(datamodule.records["val"])
    else:
        val_questions = len(datamodule.split_questions(cfg.data.name, "val_split"))
    row = {
        "system": system,
        "model": {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in settings.items()},
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "global_batch": int(cfg.datamodule.batch_size),
        "steps": args.steps,
        "warmup_steps": args.warmup,
        **timing,
        "val_recall@2": round(float(scores["val/recall@2"]), 4),
        "val_questions": val_questions,
    }
    return row if inputs is None else row | {"inputs": inputs}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="full", choices=sorted(SIZES), help="preset; the flags below override it")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, help="default: every system the data offers")
    parser.add_argument("--steps", type=int, help="optimizer steps per system, warm-up included (default 60)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed first steps (default: min(10, steps // 2))")
    parser.add_argument("--precision", help="Trainer precision (default bf16-mixed, as trainer=gpu; 32-true, ...)")
    parser.add_argument("--t5", default=None, help="a pretrained T5 for the GLM (t5-base); default: a random T5")
    parser.add_argument("--t5-size", choices=sorted(T5_SIZES), help="sizes of the random T5 (default t5-small)")
    parser.add_argument("--backend", nargs="+", choices=["eager", "flex"], help="the GLM's attention kernel(s)")
    parser.add_argument("--data", help=f"a registry dataset with OpenIE triples (default musique100), or {SYNTHETIC}")
    parser.add_argument("--kg", choices=sorted(KG_SIZES), help="synthetic KG size (default 2wiki)")
    parser.add_argument("--val-questions", type=int, help="synthetic validation questions (default 20)")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each split (default: all)")
    parser.add_argument("--workers", type=int, help="DataLoader workers (default 0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", default=None, help="tiny models: a smoke test of the code path")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    for key, value in (DEFAULTS | SIZES[args.size]).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.warmup is None:
        args.warmup = min(10, args.steps // 2)
    if not 0 < args.warmup < args.steps:
        parser.error(f"need 0 < --warmup < --steps, got warmup {args.warmup}, steps {args.steps}")
    offered = ["glm_rag"] if args.data == SYNTHETIC else list(SYSTEMS)
    args.systems = args.systems or offered
    if not set(args.systems) <= set(offered):
        parser.error(f"--data {SYNTHETIC} has GLM inputs only: --systems glm_rag (got {args.systems})")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: run with --device cpu (a smoke test) on a machine without a GPU")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_float32_matmul_precision("high")
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({platform.processor() or 'cpu'})",
        "precision": args.precision,
        "data": args.data if args.limit is None else f"{args.data} (first {args.limit} per split)",
        "torch": torch.__version__,
        "runs": [],
        "errors": [],
    }

    def save() -> str:
        text = json.dumps(result, indent=2)
        atomic_write_text(args.out, text + "\n")
        return text

    def stopped(signum: int) -> None:
        result["errors"].append({"where": "time limit", "error": f"stopped by signal {signum}"})
        save()

    # FlexAttention's CPU backward is the unfused reference, which torch guards; CPU runs are smoke tests.
    guard = cpu_flex_backward() if args.device == "cpu" else contextlib.nullcontext()
    cache: dict[str, Any] = {}
    with guard, stop_on_sigterm(stopped), tempfile.TemporaryDirectory(prefix="gpu_train_throughput-") as workdir:
        for system in args.systems:
            for backend in args.backend if system == "glm_rag" else ["-"]:
                try:
                    result["runs"].append(measure(system, args, Path(workdir), backend, cache))
                except Exception as err:  # a failed run must not cost the next one
                    text = f"{type(err).__name__}: {err}"
                    if err.__cause__ is not None:
                        text += f" (caused by {type(err.__cause__).__name__}: {err.__cause__})"
                    result["errors"].append({"where": {"system": system, "backend": backend}, "error": text[:1500]})
                save()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    print(save())
    return result


if __name__ == "__main__":
    raise SystemExit(1 if main()["errors"] else 0)
