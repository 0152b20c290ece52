"""Index build and per-question costs on real corpora of growing size: 2Wiki test subsets (issue 16 item 4).

For each size, one child process (so that its peak RSS is its own) replays the spaCy extractions cached by
``benchmarks/scaling_extract.py`` (nested random subsets, seed 0; their extraction CPU seconds come from that
run, one spaCy process), then:

- builds the index with the offline MiniLM embedder (no phrase cache: every phrase is embedded) and the
  default ``IndexSettings`` against all 1,000 test questions, stages timed by :class:`stage_clock.StageClock`
  (embed entities, synonyms, link questions: spaCy on the questions and their mentions' embeddings);
- saves and loads it (seconds, bytes on disk);
- selects every question's subgraph (2 hops, 600 triplets; GLM-RAG App. C) and runs batched PPR for every
  question (top 10 passages), both per question;
- runs an **untrained** GFM-RAG ``QueryGNN`` (random weights, seed 0; GLM-RAG Table 14 sizes: hidden 512,
  6 layers) on the whole KG (one question: a batch of 4 would hold GiB of messages at full size) and on the
  600-triplet subgraphs of a batch of 4 (Table 14) questions whose neighbourhoods exceed the budget, relation
  features random unit vectors (their values do not change the cost; as ``bench_gnn_subgraph_cpu.py``);
  CPU seconds of one timed forward after a warm-up (whole KG), median of 3 (subgraphs), per question;
- measures the GLM input rate: select + tokenise + positions + collate per question at 600 triplets
  (``bench_glm_inputs.full_path``, MiniLM tokenizer) on the first ``--glm-questions`` questions.

Every figure is CPU seconds of the child (``resource.getrusage``, one thread: run with ``OMP_NUM_THREADS=1``);
the machine is shared, so wall seconds are recorded but not compared. Peak RSS is read after the build, after
save/load and at the end (the whole-KG GNN forward is the largest). Growth exponent of a stage = slope of a
least-squares line through log(CPU s) against log(passages), and against log(triples) as well.

    python benchmarks/scaling_extract.py --sizes 500 1000 2000 6119 --cache /tmp/glmrag-scaling
    OMP_NUM_THREADS=1 python benchmarks/bench_scaling_corpus.py --sizes 500 1000 2000 6119 \\
        --cache /tmp/glmrag-scaling --out benchmarks/results/bench_scaling_corpus.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from stage_clock import StageClock, cpu_seconds, peak_rss_mb

from glmrag.io import atomic_write_text

BUILD_STAGES = ("extract", "embed_entities", "synonyms", "link_questions", "save", "load")
QUERY_STAGES = ("subgraph_per_q", "ppr_per_q", "gnn_whole_per_q", "gnn_600_per_q", "glm_inputs_per_q")
BUDGET = 600  # GLM-RAG App. C: max_triplets=600
GNN_BATCH, GNN_HIDDEN, GNN_LAYERS = 4, 512, 6  # GLM-RAG Table 14


class Replay:
    """The cached extractions of one subset, as an extractor (its manifest entry is the spaCy one)."""

    name = "spacy"

    def __init__(self, record: dict) -> None:
        self.record, self.report = record, dict(record["report"])

    def settings(self) -> dict:
        return self.record["extractor"]["settings"]

    def describe(self) -> dict:
        return self.record["extractor"]

    def extract(self, corpus):
        return self.record["extractions"]


def build_and_store(record: dict, dataset, clock: StageClock):
    """The index of the cached subset (stages timed into ``clock``), saved and loaded back; its bytes on disk."""
    from glmrag.data.types import Corpus
    from glmrag.index import build
    from glmrag.index.embed import Embedder
    from glmrag.index.store import load_index, save_index

    corpus = Corpus([dataset.corpus[dataset.corpus.position(pid)] for pid in record["passage_ids"]])
    embedder = Embedder()
    embedder.encode(["warm-up"])  # the model load is not part of the build
    replay = Replay(record)
    clock.instrument_build(build, replay, embedder)
    index = clock.measure("build", build.build_index, corpus, dataset.qa, replay, embedder, build.IndexSettings())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "index"
        clock.measure("save", save_index, index, folder)
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        index = clock.measure("load", load_index, folder)
    return corpus, index, size


def gnn_forwards(index, questions, clock: StageClock, whole_kg: bool = True) -> dict:
    """CPU seconds per question of untrained QueryGNN forwards on the whole KG (unless not ``whole_kg``: None)
    and on the 600-triplet subgraphs of a batch."""
    import torch
    from bench_gnn_subgraph_cpu import RandomEncoder

    from glmrag.datamodules.glm_inputs import SubgraphSettings
    from glmrag.models.gnn_module import question_subgraphs, subgraph_batch
    from glmrag.nn.gnn import GNNConfig, QueryGNN
    from glmrag.nn.graph_inputs import graph_inputs, seed_weights

    graph = clock.measure("gnn_graph_inputs", graph_inputs, index, RandomEncoder(), False)
    settings = SubgraphSettings(max_triplets=BUDGET)
    subs = question_subgraphs(index, [q.id for q in questions], settings)
    binding = [q.id for q, s in zip(questions, subs, strict=True) if s.truncated]  # as bench_gnn_subgraph_cpu
    ids = (binding + [q.id for q, s in zip(questions, subs, strict=True) if not s.truncated])[:GNN_BATCH]
    torch.manual_seed(0)
    config = GNNConfig(hidden_channels=GNN_HIDDEN, num_layers=GNN_LAYERS, relation_dim=graph.relation_features.shape[1])
    model = QueryGNN(config).eval()
    query = torch.nn.functional.normalize(torch.randn(len(ids), config.question_dim), dim=-1)
    weight = seed_weights(index, ids)
    batch_subs = question_subgraphs(index, ids, settings)
    batch = subgraph_batch(index, batch_subs)

    def cpu_of(rows: slice, subgraphs) -> float:
        start = cpu_seconds()
        model(graph, query[rows], weight[rows], subgraphs=subgraphs)
        return cpu_seconds() - start

    one = slice(0, 1)  # the whole-KG forward holds (B, edges, hidden) messages: GiB at 6,119 passages, so B = 1
    with torch.no_grad():
        cpu_of(slice(None), batch)  # warm-up
        if whole_kg:
            cpu_of(one, None)  # warm-up
        whole = cpu_of(one, None) if whole_kg else None  # tens of seconds at 6,119 passages: one timed run
        restricted = statistics.median(cpu_of(slice(None), batch) for _ in range(3))
    return {
        "gnn_whole_per_q": whole,
        "gnn_600_per_q": restricted / len(ids),
        "gnn_batch_triplets": [len(s) for s in batch_subs],
    }


def one_size(path: Path, glm_questions: int) -> dict:
    """Every stage of one cached subset (run in a child process)."""
    from bench_glm_inputs import full_path

    from glmrag.data.registry import load_dataset
    from glmrag.datamodules.glm_inputs import SubgraphSettings, load_tokenizer
    from glmrag.graph.subgraph import select_subgraph
    from glmrag.index.embed import DEFAULT_MODEL
    from glmrag.retrievers.ppr import PPRRetriever

    record = pickle.loads(path.read_bytes())
    dataset = load_dataset("2wiki_test")
    questions = list(dataset.qa)
    clock = StageClock()
    corpus, index, size = build_and_store(record, dataset, clock)
    rss_build = peak_rss_mb()
    seeds = [index.seeds(q.id) for q in questions]
    clock.measure("subgraph", lambda: [select_subgraph(index, s, 2, BUDGET, seed=0) for s in seeds])
    ppr = PPRRetriever()
    clock.measure("ppr_walk", ppr.prepare, index)
    clock.measure("ppr", ppr.retrieve, questions, index, corpus, 10)
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    glm_cpu, _ = full_path(index, questions[:glm_questions], tokenizer, SubgraphSettings(max_triplets=BUDGET), "s")
    gnn = gnn_forwards(index, questions, clock)
    cpu = dict(clock.cpu, extract=record["cpu_s"] + record["children_cpu_s"])
    per_q = {
        "subgraph_per_q": cpu.pop("subgraph") / len(questions),
        "ppr_per_q": cpu.pop("ppr") / len(questions),
        "glm_inputs_per_q": glm_cpu / glm_questions,
        "gnn_whole_per_q": gnn.pop("gnn_whole_per_q"),
        "gnn_600_per_q": gnn.pop("gnn_600_per_q"),
    }
    return {
        "passages": len(corpus),
        "counts": index.manifest["counts"],
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "per_question_cpu_ms": {k: round(v * 1e3, 3) for k, v in per_q.items()},
        "glm_inputs_q_per_cpu_s": round(glm_questions / glm_cpu, 1),
        "glm_questions": glm_questions,
        "wall_s": {k: round(v, 3) for k, v in (clock.wall | {"extract": record["wall_s"]}).items()},
        "index_bytes": size,
        "peak_rss_mb": {"after_build_save_load": round(rss_build, 1), "end (after GNN)": round(peak_rss_mb(), 1)},
        **gnn,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average_end": os.getloadavg(),
    }


def series(rows: list[dict]) -> dict[str, list[float]]:
    """CPU seconds (build stages) or CPU ms per question (query stages) of every row, by stage."""
    out = {s: [r["cpu_s"][s] for r in rows] for s in BUILD_STAGES}
    out |= {s: [r["per_question_cpu_ms"][s] for r in rows] for s in QUERY_STAGES}
    return out


def exponents(rows: list[dict], against: str = "passages") -> dict[str, float]:
    """Least-squares slope of log(cost) on log(passages) (or log(triples)) per stage."""
    x = np.log([r["passages"] if against == "passages" else r["counts"]["triples"] for r in rows])
    return {s: round(float(np.polyfit(x, np.log(y), 1)[0]), 2) for s, y in series(rows).items() if min(y) > 0}


def plot(rows: list[dict], slopes: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    n = [r["passages"] for r in rows]
    for axis, stages, unit in ((left, BUILD_STAGES, "CPU s"), (right, QUERY_STAGES, "CPU ms per question")):
        for stage, marker in zip(stages, "osv^D<", strict=False):
            if stage in slopes:
                axis.loglog(n, series(rows)[stage], marker=marker, label=f"{stage} (slope {slopes[stage]})")
        axis.set_xlabel("passages (2Wiki test subsets)")
        axis.set_ylabel(unit)
        axis.legend(fontsize=7)
        axis.grid(True, which="both", alpha=0.3)
    left.set_title("Index build, save, load")
    right.set_title("Per question (1,000 2Wiki test questions)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 6119])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/glmrag-scaling"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_scaling_corpus.json"))
    parser.add_argument("--glm-questions", type=int, default=200, help="questions for the GLM input rate")
    parser.add_argument("--replot", action="store_true", help="plot --out again without measuring")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # child: one cached subset
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one, args.glm_questions)))
        return
    if args.replot:
        saved = json.loads(args.out.read_text())
        plot(saved["rows"], saved["growth_exponents_passages"], args.out.with_suffix(".png"))
        return
    rows = []
    for n in args.sizes:
        path = args.cache / f"spacy_2wiki_test_{n}_p1.pkl"
        if not path.exists():
            raise SystemExit(f"{path} is missing: run benchmarks/scaling_extract.py --sizes {n} --cache {args.cache}")
        cmd = [sys.executable, __file__, "--one", str(path), "--glm-questions", str(args.glm_questions)]
        load = os.getloadavg()
        child = subprocess.run(cmd, capture_output=True, text=True)
        if child.returncode:
            raise SystemExit(f"size {n} failed:\n{child.stderr[-3000:]}")
        rows.append(json.loads(child.stdout.strip().splitlines()[-1]) | {"load_average_start": load})
        print(json.dumps(rows[-1]), flush=True)
        result = {"rows": rows}
        if len(rows) > 1:
            result |= {
                "growth_exponents_passages": exponents(rows),
                "growth_exponents_triples": exponents(rows, "triples"),
            }
        atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    if len(rows) > 1:
        plot(rows, result["growth_exponents_passages"], args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
