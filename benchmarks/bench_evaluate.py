"""Time :func:`glmrag.eval.evaluator.evaluate` on a saved KG index with synthetic rankings (CPU).

Issue 16 item 5: 5 systems x 1,000 questions of the 2Wiki test set took ~118 s,
most of it in the per-question seed searches (depth, hop distance, density).
The rankings here are random (seeded), so the metrics are meaningless; only
the time is measured, by stage, the search stage separately.

    python benchmarks/bench_evaluate.py --index PATH_TO_SAVED_INDEX --dataset 2wiki_test
    python benchmarks/bench_evaluate.py --synthetic 59281 256022   # a power-law KG of the 2Wiki index's size

Run it with ``PYTHONPATH`` pointing at another checkout to time that code on the same inputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from glmrag.data.registry import load_dataset
from glmrag.eval import breakdowns as bd
from glmrag.eval.evaluator import evaluate
from glmrag.index.store import load_index
from glmrag.index.synthetic import power_law_index, random_questions
from glmrag.retrievers.base import Ranking


def synthetic_rankings(questions, passage_ids, num_entities: int, systems: int, seed: int = 0):
    """``systems`` random rankings per question: 10 passages and 10 entities each (seeded)."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in range(systems):
        rows = []
        for q in questions:
            passages = rng.choice(len(passage_ids), size=10, replace=False)
            entities = rng.choice(num_entities, size=10, replace=False).tolist()
            scores = sorted(rng.random(10).tolist(), reverse=True)
            rows.append(Ranking(q.id, [passage_ids[p] for p in passages], scores, entities, scores))
        out[f"system{s}"] = rows
    return out


def synthetic_world(entities: int, triples: int, n_questions: int, passages: int = 6119):
    """A power-law KG (2Wiki-like: 6,119 passages, 9,933 relations) with 384-d entity embeddings and
    ``n_questions`` questions of 1-4 seeds and 2 gold passages each."""
    index = power_law_index(entities, triples, num_relations=9933, num_passages=passages, seed=0)
    rng = np.random.default_rng(2)
    index.entity_embeddings = rng.standard_normal((entities, 384)).astype(np.float32)
    questions = random_questions(index, n_questions)
    gold = rng.integers(0, passages, (n_questions, 2))
    return index, [
        dataclasses.replace(q, supporting=tuple(index.passage_ids[g] for g in row))
        for q, row in zip(questions, gold, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, help="a folder written by glmrag.index.store.save_index")
    parser.add_argument(
        "--synthetic", type=int, nargs=2, metavar=("ENTITIES", "TRIPLES"), help="a power-law KG instead of --index"
    )
    parser.add_argument("--dataset", default="2wiki_test")
    parser.add_argument("--systems", type=int, default=5)
    parser.add_argument("--questions", type=int, default=None, help="first N questions (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rows-out", type=Path, default=None, help="write every per-question row (to diff two runs)")
    args = parser.parse_args()

    if args.synthetic:
        index, questions = synthetic_world(*args.synthetic, args.questions or 1000)
        args.dataset = f"power_law_index{tuple(args.synthetic)}"
    else:
        dataset = load_dataset(args.dataset)
        index = load_index(args.index)
        questions = list(dataset.qa)[: args.questions]
    rankings = synthetic_rankings(questions, index.passage_ids, index.num_entities, args.systems)
    q_emb = np.random.default_rng(1).standard_normal((len(questions), index.entity_embeddings.shape[1]))

    _ = index.adjacency  # built once per index, outside the timings
    t0 = time.process_time()
    distances = [bd.seed_distances(index, q.id) for q in questions]
    search_s = time.process_time() - t0
    t0 = time.process_time()
    bd.question_features(questions, index, distances)
    features_s = time.process_time() - t0
    t0, wall = time.process_time(), time.perf_counter()
    result = evaluate(rankings, questions, index, reference="system0", question_embeddings=q_emb)
    evaluate_s, wall = time.process_time() - t0, time.perf_counter() - wall
    figures = {
        "dataset": args.dataset,
        "entities": index.num_entities,
        "triples": len(index.triples),
        "systems": args.systems,
        "questions": len(questions),
        "seed_search_cpu_s": round(search_s, 2),
        "question_features_cpu_s": round(features_s, 2),
        "evaluate_cpu_s": round(evaluate_s, 2),
        "evaluate_wall_s": round(wall, 2),
        "load_average_1min": round(os.getloadavg()[0], 1),
        "recall@5_system0": round(result.overall["system0"]["recall@5"].mean, 4),
    }
    text = json.dumps(figures, indent=2)
    print(text)
    if args.rows_out:
        args.rows_out.write_text(json.dumps(result.per_question, sort_keys=True) + "\n")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
