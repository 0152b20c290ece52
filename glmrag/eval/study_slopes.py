"""How fast each family gains with training questions: a slope per doubling, its CI, and where two lines cross.

GLM-RAG's Fig. 7 compares GFM-RAG* and the GLM as training data grows; its abstract speaks of "promising scaling".
For a data-scaling study (each family trained on several numbers of questions ``n``, every point tested on the
same questions), this fits, per family and test set, Recall against ``log2 n`` by least squares: the slope is the
gain per doubling of training questions.

The fit is linear in the points' means, so a family's slope is the mean over questions of one number per question,
``s_q = sum_i w_i v_iq`` (``v_iq`` the question's score at point ``i``, ``w_i = (x_i - mean x) / S_xx``): its 95% CI
is the percentile bootstrap over questions, and two families' slopes are compared by the paired bootstrap test of
``s_q(a) - s_q(b)`` (:func:`glmrag.eval.significance.paired_bootstrap_test`), every point resampled together. The
CIs hold the test questions' sampling noise only: each point is one training run (one seed), so run-to-run noise of
training is not in them.

Where two slopes differ significantly, the fitted lines' crossing is given as a projection: it assumes both families
go on gaining their measured amount per doubling, which nothing measured here supports beyond the largest point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.eval.significance import ALPHA, N_BOOT, Interval, bootstrap_ci, paired_bootstrap_test
from glmrag.eval.store import StoredRun
from glmrag.eval.study_tables import family_of


@dataclass(frozen=True)
class FamilyScaling:
    """One family's points on one test set and its fitted line, values in [0, 1]."""

    family: str
    eval_data: str
    metric: str
    train_questions: tuple[int, ...]
    """Training questions of each point, ascending."""
    means: tuple[float, ...]
    """The metric at each point, over the questions every point of the test set scored."""
    slope: Interval
    """Gain per doubling of training questions, with its 95% bootstrap CI over the test questions."""
    intercept: float
    """The fitted line at ``log2 n = 0``."""
    per_question: np.ndarray
    """(Q,) ``s_q``: the slope is its mean (module docstring)."""

    def at(self, n: float) -> float:
        """The fitted line at ``n`` training questions."""
        return self.intercept + self.slope.mean * math.log2(n)


@dataclass(frozen=True)
class SlopeComparison:
    """Two families' slopes on the same test questions: the paired difference, its test, and the crossing."""

    first: str
    second: str
    diff: Interval
    """``slope(first) - slope(second)`` per doubling, with its paired bootstrap CI."""
    p_value: float
    crossing: float | None
    """Training questions where the fitted lines meet (None: parallel, or beyond 2**1000)."""
    verdict: str
    """One sentence: what the slopes show, with the projection's assumption where one is made."""


def _scores(run: StoredRun, system: str, metric: str) -> tuple[list[str], list[float | None]] | None:
    stored = run.metrics.get("per_question") or {}
    values = (stored.get(metric) or {}).get(system)
    return (stored["question_ids"], values) if values is not None else None


def family_points(runs: Sequence[StoredRun]) -> dict[tuple[str, str], dict[int, StoredRun]]:
    """(eval data, family) -> training questions -> the run of that point (the last by folder name when a point
    was run twice), for every evaluated run that recorded its training questions."""
    points: dict[tuple[str, str], dict[int, StoredRun]] = {}
    for run in runs:
        n = run.run.get("train_questions")
        if run.evaluated and n and run.metrics.get("reference"):
            points.setdefault((str(run.run.get("eval_data", "")), family_of(run)), {})[int(n)] = run
    return points


def fit_family(family: str, eval_data: str, metric: str, by_n: dict[int, StoredRun], n_boot: int = N_BOOT):
    """The :class:`FamilyScaling` of one family's points (at least two), or None when a point stored no
    per-question scores (a run filed before they were kept) or the points were tested on other questions."""
    ns = sorted(by_n)
    if len(ns) < 2:
        return None
    scored = [_scores(by_n[n], by_n[n].metrics["reference"], metric) for n in ns]
    if any(s is None for s in scored) or len({tuple(ids) for ids, _ in scored}) != 1:
        return None
    values = np.array([[np.nan if v is None else v for v in vals] for _, vals in scored], dtype=np.float64)  # (P, Q)
    return _fit(family, eval_data, metric, ns, values, n_boot)


def _fit(family: str, eval_data: str, metric: str, ns: Sequence[int], values: np.ndarray, n_boot: int):
    values = values[:, ~np.isnan(values).any(axis=0)]  # (P, Q') questions every point scored
    x = np.log2(np.asarray(ns, dtype=np.float64))  # (P,)
    weights = (x - x.mean()) / ((x - x.mean()) ** 2).sum()  # (P,)
    per_question = weights @ values  # (Q',)
    means = values.mean(axis=1)  # (P,)
    slope = bootstrap_ci(per_question, n_boot)
    intercept = float(means.mean() - slope.mean * x.mean())
    return FamilyScaling(family, eval_data, metric, tuple(ns), tuple(map(float, means)), slope, intercept, per_question)


def compare(a: FamilyScaling, b: FamilyScaling, n_boot: int = N_BOOT) -> SlopeComparison:
    """The paired test of ``a``'s slope against ``b``'s (both fitted on the same questions) and what it implies."""
    if a.per_question.shape != b.per_question.shape:
        raise ValueError(f"{a.family} and {b.family} were fitted on other questions of {a.eval_data}")
    diff, p = paired_bootstrap_test(a.per_question, b.per_question, n_boot)
    gap = a.slope.mean - b.slope.mean
    meet = (b.intercept - a.intercept) / gap if abs(gap) > 1e-12 else math.inf  # log2 n where the lines meet
    crossing = 2**meet if abs(meet) < 1000 else None
    return SlopeComparison(a.family, b.family, diff, p, crossing, _verdict(a, b, p, crossing, n_boot))


def _p_text(p: float, n_boot: int) -> str:
    """``p = 0.223``; ``p ≤ 0.001`` where no resample was as extreme (the least p that ``n_boot`` resamples give)."""
    return f"p ≤ {p:.3f}" if p * (n_boot + 1) <= 1 + 1e-9 else f"p = {p:.3f}"


def _verdict(a: FamilyScaling, b: FamilyScaling, p: float, crossing: float | None, n_boot: int) -> str:
    p_text = _p_text(p, n_boot)
    per = f"{100 * abs(a.slope.mean - b.slope.mean):.1f} points per doubling"
    if p >= ALPHA:
        return (
            f"the slopes do not differ significantly ({p_text}): on these points {a.family} gains no faster or "
            f"slower than {b.family}, and no crossing is projected"
        )
    steep, flat = (a, b) if a.slope.mean > b.slope.mean else (b, a)
    largest = max(max(a.train_questions), max(b.train_questions))
    smallest = min(min(a.train_questions), min(b.train_questions))
    gains = f"{steep.family} gains {per} more than {flat.family} ({p_text})"
    if steep.at(largest) >= flat.at(largest):
        if crossing is not None and smallest <= crossing <= largest:
            return f"{gains}; the fitted lines cross within the measured range, at about {crossing:,.0f} questions"
        return f"{gains} and lies above it over the whole measured range"
    if crossing is None:
        return f"{gains}, but its line meets {flat.family}'s only beyond 1,000 doublings: no crossing is projected"
    doublings = math.log2(crossing / largest)
    return (
        f"{gains}: a projection, assuming both keep their measured log-linear slopes beyond {largest} questions, "
        f"puts the crossing at about {crossing:,.0f} training questions ({doublings:.1f} doublings past the largest "
        "point)"
    )


def data_scaling(runs: Sequence[StoredRun], metric: str, n_boot: int = N_BOOT):
    """Every family's fit (:func:`fit_family`) and every pair's comparison (:func:`compare`), per test set:
    ``{eval data: (fits, comparisons)}``, test sets with at least one fit only."""
    fits: dict[str, list[FamilyScaling]] = {}
    for (eval_data, family), by_n in sorted(family_points(runs).items()):
        fitted = fit_family(family, eval_data, metric, by_n, n_boot)
        if fitted is not None:
            fits.setdefault(eval_data, []).append(fitted)
    out = {}
    for eval_data, families in fits.items():
        pairs = [(a, b) for i, a in enumerate(families) for b in families[i + 1 :]]
        same = [(a, b) for a, b in pairs if a.per_question.shape == b.per_question.shape]
        out[eval_data] = (families, [compare(a, b, n_boot) for a, b in same])
    return out


def format_slopes_markdown(runs: Sequence[StoredRun], metrics: Sequence[str], n_boot: int = N_BOOT) -> str:
    """The report's section on data scaling: per test set and metric, each family's points and slope per doubling
    with its CI, then each pair of families' comparison. Empty when no family has two points."""
    lines = []
    for metric in metrics:
        for eval_data, (families, comparisons) in data_scaling(runs, metric, n_boot).items():
            label = metric.replace("recall@", "Recall@")
            lines += [
                f"## {label} per doubling of training questions, on {eval_data}",
                "",
                "| family | points (training questions: value) | slope per doubling [95% CI] |",
                "|---|---|---|",
            ]
            for f in families:
                points = ", ".join(f"{n}: {100 * m:.1f}" for n, m in zip(f.train_questions, f.means, strict=True))
                lines.append(f"| {f.family} | {points} | {_signed(f.slope)} |")
            lines.append("")
            for c in comparisons:
                lines.append(f"- {c.first} - {c.second}: {_signed(c.diff)} per doubling; {c.verdict}.")
            lines.append("")
    if lines:
        lines.append(
            "Least-squares fits of each family's points against log2(training questions), on the test questions every "
            "point scored; CIs are percentile bootstraps over those questions and slope differences paired bootstrap "
            "tests (glmrag/eval/study_slopes.py). One training run per point: the CIs hold test-set noise, not "
            "training noise."
        )
    return "\n".join(lines) + ("\n" if lines else "")


def _signed(interval: Interval) -> str:
    """``+3.1 [+0.4, +5.9]``: an interval of values in [0, 1], ×100."""
    return f"{100 * interval.mean:+.1f} [{100 * interval.low:+.1f}, {100 * interval.high:+.1f}]"
