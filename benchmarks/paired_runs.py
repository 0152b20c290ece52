"""Paired bootstrap of two stored runs' trained systems on the questions both scored (issue 52: a study's points
against each other, which the report does not test). Reads each run folder's metrics.json ``per_question`` scores.

    python benchmarks/paired_runs.py <results>/<run A> <results>/<run B>    # A - B, Recall@2 and @5
"""

import argparse
import json
from pathlib import Path

import numpy as np

from glmrag.eval.significance import paired_bootstrap_test


def reference_scores(run: Path, metric: str) -> dict[str, float]:
    """Question id -> the run's trained system's score on ``metric``; questions it could not score left out."""
    stored = json.loads((run / "metrics.json").read_text())
    per_question = stored["per_question"]
    scores = zip(per_question["question_ids"], per_question[metric][stored["reference"]], strict=True)
    return {q: s for q, s in scores if s is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args()
    for run in (args.a, args.b):
        if not (run / "metrics.json").is_file():
            parser.error(f"{run / 'metrics.json'}: no such file; pass a stored run's folder (a study's results/<run>)")
    for metric in ("recall@2", "recall@5"):
        a, b = reference_scores(args.a, metric), reference_scores(args.b, metric)
        both = [q for q in a if q in b]
        diff, p = paired_bootstrap_test(np.array([a[q] for q in both]), np.array([b[q] for q in both]))
        ci = f"[{100 * diff.low:+.1f}, {100 * diff.high:+.1f}]"
        print(f"{metric} A - B: {100 * diff.mean:+.1f} {ci}, p = {p:.3f}, {diff.n} questions")


if __name__ == "__main__":
    main()
