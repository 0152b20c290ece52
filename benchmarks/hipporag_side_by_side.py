"""retriever=hipporag beside HippoRAG's own code on the embedded MuSiQue set (issue 33).

The reference is a run of HippoRAG's released legacy retrieval (OSU-NLP-Group/HippoRAG, branch ``legacy``,
commit b144c46, ``src/create_graph.py`` then ``HippoRAG.rank_docs``), made outside this repository with
all-MiniLM-L6-v2 as its retrieval encoder, the paper's main-experiment settings (damping 0.5, synonym
threshold 0.8, node specificity, no document ensemble), and glmrag's spaCy question mentions written into
its query-NER cache (``output/musique_train_queries.named_entity_output.tsv``) so that both link the same
strings. Its rankings are read from the JSON it wrote: ``{question_id: {"top": [[corpus_index, score], ...],
"seeds": [[phrase, weight], ...]}}`` in the question order of ``musique_train.json``.

    python benchmarks/hipporag_side_by_side.py --reference /path/to/hipporag_run/out/rankings.json \\
        [--out benchmarks/results/hipporag_side_by_side.json]

It prints the overlap of the top-5 passages, Recall@2 / @5 of both (gold: MuSiQue's supporting paragraphs)
and, for each question whose top-5 differs, both lists and both seed sets.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import glmrag
from glmrag.retrievers.hipporag import HippoRAGRetriever


def recall(ranked: list[str], gold: set[str], k: int) -> float:
    return len(set(ranked[:k]) & gold) / len(gold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, required=True, help="rankings.json of the HippoRAG run")
    parser.add_argument("--out", type=Path, default=None, help="write the comparison here as JSON")
    args = parser.parse_args()
    reference = json.loads(args.reference.read_text())

    data = glmrag.load_data("musique100")
    index = glmrag.build_index(data)
    questions = list(data.qa)
    retriever = HippoRAGRetriever()
    start = time.perf_counter()
    rankings = {r.question_id: r for r in retriever.retrieve(questions, index, data.corpus, top_k=10)}
    seconds = time.perf_counter() - start
    graph = retriever.prepare(index)

    restart, _ = retriever.restart(questions, index)  # (E, B) the seeds of every question, one spaCy pass
    rows, differing = [], []
    for b, q in enumerate(questions):
        ours = rankings[q.id].passage_ids
        theirs = [data.corpus.ids[i] for i, _ in reference[q.id]["top"]]
        gold = set(q.supporting)
        seeds = sorted(index.entities[e] for e in np.flatnonzero(restart[:, b]))
        row = {
            "question_id": q.id,
            "same_top5": ours[:5] == theirs[:5],
            "same_top5_set": set(ours[:5]) == set(theirs[:5]),
            "recall": {f"ours@{k}": recall(ours, gold, k) for k in (2, 5)}
            | {f"hipporag@{k}": recall(theirs, gold, k) for k in (2, 5)},
        }
        rows.append(row)
        if not row["same_top5"]:
            differing.append(
                row
                | {
                    "ours_top5": ours[:5],
                    "hipporag_top5": theirs[:5],
                    "ours_seeds": seeds,
                    "hipporag_seeds": sorted(phrase for phrase, _ in reference[q.id]["seeds"]),
                }
            )
    n = len(rows)
    summary = {
        "questions": n,
        "same_top5_in_order": sum(r["same_top5"] for r in rows),
        "same_top5_as_set": sum(r["same_top5_set"] for r in rows),
        "recall": {key: round(100 * float(np.mean([r["recall"][key] for r in rows])), 2) for key in rows[0]["recall"]},
        "graph": {
            "nodes": int(len(graph.nodes)),
            "undirected_pairs": int(graph.walk.transition_t.nnz // 2),
        },
        "retrieve_seconds": round(seconds, 1),
    }
    print(json.dumps(summary, indent=1))
    for row in differing:
        print(json.dumps(row, ensure_ascii=False))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "differing": differing}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
