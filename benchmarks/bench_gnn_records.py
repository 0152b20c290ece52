"""The GNN's question records read from memory and from LitData chunks (issue 36, item 1).

``KGQADataModule(store="memory")`` builds its question records in ``setup``; ``store="litdata"`` reads them
row by row from LitData chunks written once (``glmrag/datamodules/gnn_datamodule.py``). For musique100's training
split (the embedded data, the offline MiniLM encoder), with 0 and 2 DataLoader workers: the best of
``--epochs`` wall times to read every training batch (collate included: targets and seed weights), and its
rate in questions per second. A GNN training step at 2Wiki-test size takes 0.77 s at batch 1 on one thread
(benchmarks/RESULTS.md, issue 35), so either rate is far above what training asks.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_gnn_records.py`` (about a minute with a built index in
``$GLMRAG_CACHE_DIR``; the first run builds it). Prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from types import SimpleNamespace

from omegaconf import OmegaConf

from glmrag.datamodules.gnn_datamodule import KGQADataModule
from glmrag.jobs.common import compose_config

ENCODER = "offline:all-MiniLM-L6-v2"


def epoch_seconds(dm: KGQADataModule, epoch: int) -> tuple[int, float]:
    """Questions read and wall seconds of one training epoch of ``dm``."""
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(epoch)
    start = time.perf_counter()
    questions = sum(len(batch["question_ids"]) for batch in loader)
    return questions, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = parser.parse_args()
    cfg = compose_config("train", ["experiment=demo", f"index.embed_model={ENCODER}", "index.embed_dim=384"])
    index = OmegaConf.to_container(cfg.index, resolve=True)
    with tempfile.TemporaryDirectory() as records_dir:
        for workers in args.workers:
            for store in ("memory", "litdata"):
                dm = KGQADataModule(
                    "musique100",
                    index=index,
                    store=store,
                    records_dir=records_dir,
                    num_workers=workers,
                    embed_model=ENCODER,
                )
                dm.trainer = SimpleNamespace(world_size=1, global_rank=0, fit_loop=None)  # one process
                dm.prepare_data()
                dm.setup("fit")
                runs = [epoch_seconds(dm, epoch) for epoch in range(args.epochs)]
                questions, best = runs[0][0], min(seconds for _, seconds in runs)
                row = {"store": store, "workers": workers, "questions": questions, "best_s": round(best, 5)}
                print(json.dumps(row | {"questions_per_s": round(questions / best)}), flush=True)


if __name__ == "__main__":
    main()
