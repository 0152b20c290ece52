"""How per-question graph costs grow with the KG (issue 16 item 4), on synthetic KGs.

Power-law KGs (``glmrag.index.synthetic.power_law_index``: Zipf-like degrees, exponent 0.9) of
``--triples`` triples with one entity per 4.3 triples (the 2Wiki test index's ratio: 59,281 entities,
256,022 triples), 20 random questions of 1-4 seeds each. Per size, CPU seconds (``time.process_time``;
the machine is shared) of: building the CSR adjacency and the PPR random walk (once per KG), subgraph
selection (2 hops, 600 triplets; GLM-RAG App. C), batched PPR and the evaluator's 10-hop seed search, per
question. The growth exponent of each is the slope of log(cost) on log(triples).

``--gnn-glm`` measures instead, per question: an untrained GFM-RAG GNN forward (hidden 512, 6 layers; GLM-RAG
Table 14) on the whole KG (KGs of at most ``--whole-max`` triples: the forward holds (edges, 512) float32
messages per layer, 2 KiB per directed edge) and on 600-triplet subgraphs, and the GLM input pipeline
(select + tokenise + positions + collate, 600 triplets, MiniLM tokenizer on the ``e<i>``/``r<i>`` names,
so fewer tokens than real phrases), both as ``bench_scaling_corpus.py`` measures them on real corpora.
Synonym search: ``bench_synonyms.py``; real-corpus builds: ``bench_scaling_corpus.py``.

``--rspmm`` measures instead the memory of one GFM-RAG training step (forward + backward, one question) at a
fixed number of entities (``--entities``; 1,000 relations) and ``--edges`` directed edges, for the fused
aggregation (:mod:`glmrag.nn.rspmm`) and, up to ``--materialized-max`` edges, the materialised one: peak extra
RSS of the step (as ``bench_gnn_cpu.py`` measures it), what autograd saved, and the seconds. The edges'
sorted orders (built once per graph and cached) are built before the step and reported apart.

    python benchmarks/bench_scaling.py --triples 10000 100000 1000000 --out benchmarks/results/bench_scaling.json
    python benchmarks/bench_scaling.py --gnn-glm --triples 10000 100000 1000000 --whole-max 100000 \\
        --out benchmarks/results/bench_scaling_gnn_glm.json
    python benchmarks/bench_scaling.py --rspmm --edges 100000 200000 500000 1000000 \\
        --out benchmarks/results/bench_scaling_rspmm.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from glmrag.graph.subgraph import select_subgraph
from glmrag.graph.traverse import hop_distances
from glmrag.index.synthetic import power_law_index, random_questions
from glmrag.io import atomic_write_text
from glmrag.retrievers.ppr import PPRRetriever

TRIPLES_PER_ENTITY = 256_022 / 59_281
STAGES = ("build_graph_s", "subgraph_ms", "ppr_ms", "seed_search_ms")
GNN_GLM_STAGES = ("gnn_whole_ms", "gnn_600_ms", "glm_inputs_ms")
RSPMM_STAGES = ("train_step_peak_extra_mib", "saved_for_backward_mib", "train_step_s")
RSPMM_SLOPES = tuple(f"{k}_{a}" for k in RSPMM_STAGES for a in ("fused", "materialized")) + ("step_plus_csr_mib_fused",)


def cpu(fn):
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def measure(triples: int, n_questions: int) -> dict:
    index = power_law_index(int(triples / TRIPLES_PER_ENTITY), triples, num_relations=1000, num_passages=6119)
    questions = random_questions(index, n_questions)
    ppr = PPRRetriever()
    build_s, _ = cpu(lambda: (index.adjacency, ppr.prepare(index)))
    seeds = [index.seeds(q.id) for q in questions]
    sub_s, _ = cpu(lambda: [select_subgraph(index, s, max_hops=2, max_triplets=600, seed=0) for s in seeds])
    ppr_s, _ = cpu(lambda: ppr.entity_scores(questions, index))
    search_s, _ = cpu(lambda: [hop_distances(index, s, cutoff=10) for s in seeds])
    per_q = 1000 / n_questions
    return {
        "triples": triples,
        "entities": index.num_entities,
        "build_graph_s": round(build_s, 3),
        "subgraph_ms": round(sub_s * per_q, 3),
        "ppr_ms": round(ppr_s * per_q, 3),
        "seed_search_ms": round(search_s * per_q, 3),
    }


def measure_gnn_glm(triples: int, n_questions: int, whole_kg: bool) -> dict:
    """CPU ms per question of the GNN forwards (whole KG when ``whole_kg``, 600-triplet subgraphs) and GLM inputs."""
    from bench_glm_inputs import full_path
    from bench_scaling_corpus import BUDGET, gnn_forwards
    from stage_clock import StageClock

    from glmrag.datamodules.glm_inputs import SubgraphSettings, load_tokenizer
    from glmrag.index.embed import DEFAULT_MODEL

    index = power_law_index(int(triples / TRIPLES_PER_ENTITY), triples, num_relations=1000, num_passages=6119)
    questions = random_questions(index, n_questions)
    gnn = gnn_forwards(index, questions, StageClock(), whole_kg)
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    glm_s, _ = full_path(index, questions, tokenizer, SubgraphSettings(max_triplets=BUDGET), "synthetic")
    whole = gnn["gnn_whole_per_q"]
    return {
        "triples": triples,
        "entities": index.num_entities,
        "gnn_whole_ms": round(whole * 1e3, 1) if whole is not None else None,
        "gnn_600_ms": round(gnn["gnn_600_per_q"] * 1e3, 1),
        "glm_inputs_ms": round(glm_s / n_questions * 1e3, 2),
        "gnn_batch_triplets": gnn["gnn_batch_triplets"],
    }


def measure_rspmm(edges: int, aggregation: str, args: argparse.Namespace) -> dict:
    """One training step at ``edges`` directed edges: peak extra MiB, saved MiB, seconds; MiB of the edge orders."""
    import torch
    from bench_gnn_cpu import EMBED_DIM, random_graph_inputs, train_step

    from glmrag.nn.gnn import GNNConfig, QueryGNN
    from glmrag.nn.graph_inputs import seed_weights
    from glmrag.nn.rspmm import relational_csr

    torch.manual_seed(0)
    index = power_law_index(args.entities, edges // 2, num_relations=1000, num_passages=6119)
    graph = random_graph_inputs(index, EMBED_DIM)
    config = GNNConfig(hidden_channels=args.hidden, num_layers=args.layers, aggregation=aggregation)
    query = torch.nn.functional.normalize(torch.randn(1, config.question_dim), dim=-1)
    weight = seed_weights(index, [q.id for q in random_questions(index, 1)])
    target = torch.zeros(1, index.num_entities)
    target[0, :4] = 1.0
    csr_mib = 0.0
    if aggregation == "fused":  # built once per graph and cached: not part of a step
        csr = relational_csr(graph.edge_index, graph.edge_type, graph.num_nodes)
        csr_mib = sum(t.numel() * t.element_size() for order in csr[:2] for t in order) / 2**20
    step = train_step(QueryGNN(config), graph, query, weight, target)
    return {"directed_edges": graph.num_edges, "entities": index.num_entities, "csr_mib": round(csr_mib, 1)} | step


def rspmm_rows(args: argparse.Namespace) -> list[dict]:
    """One row per edge count: the fused step and, up to ``--materialized-max`` edges, the materialised one."""
    for aggregation in ("fused", "materialized"):  # one-off allocations (thread pools, autograd) out of the rows
        measure_rspmm(2_000, aggregation, argparse.Namespace(**{**vars(args), "entities": 500}))
    rows = []
    for edges in args.edges:
        row = {}
        for aggregation in ("fused", "materialized"):
            if aggregation == "materialized" and edges > args.materialized_max:
                row |= {f"{k}_materialized": None for k in RSPMM_STAGES}
                continue
            step = measure_rspmm(edges, aggregation, args)
            row |= {"directed_edges": step["directed_edges"], "entities": step["entities"]}
            row |= {f"{k}_{aggregation}": step[k] for k in RSPMM_STAGES}
            if aggregation == "fused":
                row["csr_mib"] = step["csr_mib"]
                row["step_plus_csr_mib_fused"] = round(step["train_step_peak_extra_mib"] + step["csr_mib"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def run_rspmm(args: argparse.Namespace) -> None:
    rows = rspmm_rows(args)
    settings = {"entities": args.entities, "hidden": args.hidden, "layers": args.layers, "batch": 1}
    slopes = exponents(rows, RSPMM_SLOPES, size="directed_edges")
    result = {"rows": rows, "growth_exponents": slopes, "settings": settings}
    print(text := json.dumps(result, indent=2))
    atomic_write_text(args.out, text + "\n")
    plot(rows, slopes, args.out.with_suffix(".png"), size="directed_edges")


def exponents(rows: list[dict], stages=STAGES, size: str = "triples") -> dict[str, float]:
    out = {}
    for s in stages:
        kept = [r for r in rows if r[s] is not None]
        if len(kept) > 1:
            x, y = np.log([r[size] for r in kept]), np.log([max(r[s], 1e-6) for r in kept])
            out[s] = round(float(np.polyfit(x, y, 1)[0]), 2)
    return out


def plot(rows: list[dict], slopes: dict[str, float], path: Path, size: str = "triples") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s, slope in slopes.items():
        kept = [r for r in rows if r[s] is not None]
        ax.loglog([r[size] for r in kept], [r[s] for r in kept], marker="o", label=f"{s} (slope {slope})")
    ax.set_xlabel(size.replace("_", " "))
    ax.set_ylabel("CPU cost (s for build, ms per question otherwise)" if size == "triples" else "MiB, or s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triples", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/bench_scaling[_rspmm].json")
    parser.add_argument("--gnn-glm", action="store_true", help="GNN forwards and GLM input rate instead")
    parser.add_argument("--whole-max", type=int, default=100_000, help="--gnn-glm: largest KG of a whole-KG forward")
    parser.add_argument("--rspmm", action="store_true", help="training-step memory, fused vs materialised")
    parser.add_argument("--edges", type=int, nargs="+", default=[100_000, 200_000, 500_000, 1_000_000])
    parser.add_argument("--entities", type=int, default=20_000, help="--rspmm: fixed number of entities")
    parser.add_argument("--hidden", type=int, default=512, help="--rspmm: GLM-RAG Table 14: 512")
    parser.add_argument("--layers", type=int, default=2, help="--rspmm: message-passing layers")
    parser.add_argument("--materialized-max", type=int, default=500_000, help="--rspmm: largest materialised run")
    args = parser.parse_args()
    args.out = args.out or Path(f"benchmarks/results/bench_scaling{'_rspmm' if args.rspmm else ''}.json")
    if args.rspmm:
        return run_rspmm(args)
    rows = []
    for triples in args.triples:
        if args.gnn_glm:
            rows.append(measure_gnn_glm(triples, args.questions, triples <= args.whole_max))
        else:
            rows.append(measure(triples, args.questions))
        print(json.dumps(rows[-1]), flush=True)
    slopes = exponents(rows, GNN_GLM_STAGES if args.gnn_glm else STAGES)
    result = {"rows": rows, "growth_exponents": slopes, "questions_per_size": args.questions}
    print(text := json.dumps(result, indent=2))
    atomic_write_text(args.out, text + "\n")
    plot(rows, slopes, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
