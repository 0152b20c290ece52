"""GLM input pipeline on the CPU: questions/s per core, from a question to a padded batch, on real graphs.

Two paths, per dataset and triplet budget (GLM-RAG App. C: 2 hops; 600 triplets is the paper's budget):

- **full**: select the subgraph, tokenise it (``question_record``: select + tokenise), expand its
  positions and pad it (``GLMCollate``, batch 2 as GLM-RAG Table 14), one thread, in this process. This is
  what ``prepare_data`` plus the per-batch collate cost together.
- **stream**: the records written once as LitData chunks of 256 (``write_chunk_split``, one writer), then
  read back from their local folder (``ChunkShards``) and collated by ``SubgraphDataModule``'s loader
  (``RankStream`` + ``StreamBatchSampler`` + ``GLMCollate``) with 0, 1 or 2 DataLoader workers: what each
  training epoch costs. Measured twice: positions computed per batch (the default) and positions stored in
  the chunks (``precompute``), whose chunk bytes are reported too.

Rates per core are per CPU second (the machine is shared, so wall time would count other jobs): of this
process for **full** (``time.process_time``), and of this process plus its DataLoader workers for
**stream** (the workers' user + system time from ``/proc``). **stream** also reports the wall-clock rate.

Positions use the defaults (``triple`` mode, ``last`` rule); the tokenizer is the offline MiniLM one
(T5's SentencePiece gives similar token counts). Indexes come from ``--index-cache`` (built there on the
first run: minutes, a 2Wiki spaCy build much longer). Timings are the median of ``--repeats`` passes.

    OMP_NUM_THREADS=1 python benchmarks/bench_glm_inputs.py --datasets musique100 2wiki_test \\
        --triplets 300 600 1200 --workers 0 1 2 --out benchmarks/results/bench_glm_inputs.json

``--breakdown`` prints milliseconds per question of each stage instead (select, tokenise, positions in
both modes, collate), two passes: the second reads tokenised phrases from the per-process cache.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from glmrag.data.registry import load_dataset
from glmrag.datamodules.chunk_records import ChunkShards
from glmrag.datamodules.glm_inputs import GLMCollate, SubgraphSettings, load_tokenizer, question_record
from glmrag.datamodules.shard_stream import RankStream, StreamBatchSampler
from glmrag.datamodules.subgraph_data import write_chunk_split
from glmrag.graph.levi import graph_positions, layout_subgraph
from glmrag.graph.subgraph import select_subgraph
from glmrag.index.cache import get_index
from glmrag.index.embed import DEFAULT_MODEL

EXTRACTORS = {"musique100": "openie", "2wiki_test": "spacy"}
BATCH = 2  # GLM-RAG Table 14


def index_of(name: str, cache: str):
    cfg = OmegaConf.create(
        {
            "cache_dir": cache,
            "extractor": EXTRACTORS[name],
            "rebuild": False,
            "embed_model": DEFAULT_MODEL,
            "synonym_threshold": 0.8,
            "synonym_top_k": 100,
            "spacy_processes": 1,
            "llm": None,
        }
    )
    dataset = load_dataset(name)
    return dataset, get_index(dataset, cfg)


def full_path(index, questions, tokenizer, settings, name: str) -> tuple[float, list[dict]]:
    """CPU seconds of this process (``time.process_time``) for select + tokenise + positions + collate of every
    question (pairs), and the records."""
    emb = np.zeros(384, dtype=np.float32)  # the sentence encoder is not part of this pipeline
    collate = GLMCollate()
    start = time.process_time()
    records = [question_record(index, q, name, tokenizer, settings, emb) for q in questions]
    for i in range(0, len(records), BATCH):
        collate(records[i : i + BATCH])
    return time.process_time() - start, records


def stream_path(shards: ChunkShards, workers: int) -> tuple[float, float]:
    """Wall seconds and CPU seconds (this process plus its DataLoader workers, :func:`children_cpu`) to read and
    collate one epoch of the shards with ``workers`` workers (warm: after one epoch that starts them)."""
    stream = RankStream(shards, BATCH, readers=max(1, workers))
    loader = DataLoader(
        stream,
        sampler=StreamBatchSampler(len(stream)),
        batch_size=None,
        collate_fn=GLMCollate(),
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    for _ in loader:  # warm-up epoch: worker start, page cache
        pass
    loader.sampler.set_epoch(1)
    workers_cpu, wall, cpu = children_cpu(), time.perf_counter(), time.process_time()  # /proc read outside
    for _ in loader:
        pass
    return time.perf_counter() - wall, time.process_time() - cpu + children_cpu() - workers_cpu


def children_cpu() -> float:
    """CPU seconds (user + system) so far of this process's live child processes (the persistent DataLoader
    workers), read from ``/proc/<pid>/stat``; 0 where there is no ``/proc``."""
    total, me, tick = 0.0, os.getpid(), os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
        except (OSError, IndexError):
            continue  # a process that ended meanwhile
        if int(fields[1]) == me:
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def breakdown(index, questions, tokenizer, budget: int) -> dict[str, float]:
    """Milliseconds per question of each stage (one pass; run twice to see the phrase-token cache warm)."""
    settings, collate = SubgraphSettings(max_triplets=budget), GLMCollate()
    spent = dict.fromkeys(("select", "tokenise", "positions_triple", "positions_path", "collate_per_question"), 0.0)
    records = []
    for q in questions:
        start = time.process_time()
        sub = select_subgraph(index, index.seeds(q.id), settings.max_hops, budget, seed=settings.bfs_seed(q.id))
        spent["select"] += time.process_time() - start
        start = time.process_time()
        layout = layout_subgraph(index, sub, tokenizer, q.question, settings.question_eos)
        spent["tokenise"] += time.process_time() - start
        for mode in ("triple", "path"):
            start = time.process_time()
            graph_positions(layout, mode)
            spent[f"positions_{mode}"] += time.process_time() - start
        records.append(question_record(index, q, "bench", tokenizer, settings, np.zeros(384, np.float32)))
    start = time.process_time()
    for i in range(0, len(records), BATCH):
        collate(records[i : i + BATCH])
    spent["collate_per_question"] = time.process_time() - start
    return {name: round(seconds / len(questions) * 1e3, 1) for name, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["musique100", "2wiki_test"])
    parser.add_argument("--triplets", nargs="+", type=int, default=[300, 600, 1200])
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--questions", type=int, default=100, help="first N questions of each dataset")
    parser.add_argument("--precompute-questions", type=int, default=20, help="questions in the stored-positions run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--index-cache", default=os.path.expanduser("~/.cache/glmrag/indexes"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--breakdown", action="store_true", help="only the per-stage ms/question, two passes")
    args = parser.parse_args()

    tokenizer = load_tokenizer(DEFAULT_MODEL)
    if args.breakdown:
        for name in args.datasets:
            dataset, index = index_of(name, args.index_cache)
            for budget in args.triplets:
                for label in ("cold", "warm"):
                    stages = breakdown(index, list(dataset.qa)[: args.questions], tokenizer, budget)
                    print(json.dumps({"dataset": name, "triplets": budget, "pass": label, **stages}), flush=True)
        return
    rows, reps = [], range(args.repeats)
    for name in args.datasets:
        dataset, index = index_of(name, args.index_cache)
        questions = list(dataset.qa)[: args.questions]
        for budget in args.triplets:
            settings = SubgraphSettings(max_triplets=budget)
            times, records = [], []
            for _ in range(args.repeats):
                seconds, records = full_path(index, questions, tokenizer, settings, name)
                times.append(seconds)
            row = {
                "dataset": name,
                "triplets": budget,
                "questions": len(questions),
                "mean_tokens": round(float(np.mean([r["num_tokens"] for r in records])), 1),
                "full_qps_per_core": round(len(questions) / statistics.median(times), 1),
            }
            with tempfile.TemporaryDirectory() as tmp:
                shards = _chunks(Path(tmp) / "plain", records)
                for workers in args.workers:
                    wall, cpu = (
                        statistics.median(t) for t in zip(*(stream_path(shards, workers) for _ in reps), strict=True)
                    )
                    row[f"stream_qps_w{workers}"] = round(len(questions) / wall, 1)
                    row[f"stream_qps_per_core_w{workers}"] = round(len(questions) / cpu, 1)
                few = questions[: args.precompute_questions]
                stored = SubgraphSettings(max_triplets=budget, precompute=True)
                emb = np.zeros(384, dtype=np.float32)
                kept = [question_record(index, q, name, tokenizer, stored, emb) for q in few]
                precomputed = _chunks(Path(tmp) / "stored", kept)
                size = sum(p.stat().st_size for p in (Path(tmp) / "stored").glob("*.bin"))
                seconds = statistics.median(stream_path(precomputed, 0)[1] for _ in reps)
                plain = statistics.median(
                    stream_path(_chunks(Path(tmp) / "computed", records[: len(few)]), 0)[1] for _ in reps
                )
                row["precomputed_stream_qps_w0"] = round(len(few) / seconds, 1)
                row["computed_stream_qps_w0_same_questions"] = round(len(few) / plain, 1)
                row["precomputed_mib_per_question"] = round(size / len(few) / 2**20, 2)
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs)",
        "load_average": os.getloadavg(),
        "clock": "per core: CPU s of this process (full) and of it plus its workers (stream); stream_qps_w*: wall",
        "omp_threads": os.environ.get("OMP_NUM_THREADS"),
        "rows": rows,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(_markdown(rows))


def _chunks(folder: Path, records: list[dict]) -> ChunkShards:
    """``records`` as LitData chunks of 256 in ``folder`` (written by one process the first time)."""
    if not folder.exists():
        write_chunk_split(folder, records.__getitem__, len(records), 256, 1, {})
    return ChunkShards([str(folder)])


def _markdown(rows: list[dict]) -> str:
    lines = [
        "| dataset | triplets | tokens | full q/s/core | stream q/s/core w0 / w1 / w2 (wall q/s) | "
        "stored positions: q/s w0 vs computed, MiB/question |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        stream = " / ".join(
            f"{r.get(f'stream_qps_per_core_w{w}', '-')} ({r.get(f'stream_qps_w{w}', '-')})" for w in (0, 1, 2)
        )
        stored = (
            f"{r['precomputed_stream_qps_w0']} vs {r['computed_stream_qps_w0_same_questions']}, "
            f"{r['precomputed_mib_per_question']}"
        )
        cells = [r["dataset"], r["triplets"], r["mean_tokens"], r["full_qps_per_core"], stream, stored]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
