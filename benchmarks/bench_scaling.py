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

    python benchmarks/bench_scaling.py --triples 10000 100000 1000000 --out benchmarks/results/bench_scaling.json
    python benchmarks/bench_scaling.py --gnn-glm --triples 10000 100000 1000000 --whole-max 100000 \\
        --out benchmarks/results/bench_scaling_gnn_glm.json
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

    from glmrag.index.embed import DEFAULT_MODEL
    from glmrag.models.glm_inputs import SubgraphSettings, load_tokenizer

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


def exponents(rows: list[dict], stages=STAGES) -> dict[str, float]:
    out = {}
    for s in stages:
        kept = [r for r in rows if r[s] is not None]
        if len(kept) > 1:
            x, y = np.log([r["triples"] for r in kept]), np.log([max(r[s], 1e-6) for r in kept])
            out[s] = round(float(np.polyfit(x, y, 1)[0]), 2)
    return out


def plot(rows: list[dict], slopes: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s, slope in slopes.items():
        kept = [r for r in rows if r[s] is not None]
        ax.loglog([r["triples"] for r in kept], [r[s] for r in kept], marker="o", label=f"{s} (slope {slope})")
    ax.set_xlabel("triples")
    ax.set_ylabel("CPU cost (s for build, ms per question otherwise)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triples", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_scaling.json"))
    parser.add_argument("--gnn-glm", action="store_true", help="GNN forwards and GLM input rate instead")
    parser.add_argument("--whole-max", type=int, default=100_000, help="--gnn-glm: largest KG of a whole-KG forward")
    args = parser.parse_args()
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
