"""Bootstrap confidence intervals and paired tests of systems against a reference.

GLM-RAG App. H (Table 22) reports, per dataset and metric, the mean with a
95% bootstrap CI, and a *paired bootstrap test* of GLM-RAG against every other
system, with Holm-Bonferroni correction across all comparisons (family-wise
error rate); markers ``*``/``**``/``***`` mean the reference is significantly
better at p < .05/.01/.001 and ``†`` that it is significantly worse. The
paired bootstrap is therefore the default test here; a paired (sign-flip)
permutation test is offered as a check that needs no resampling assumption.

Resampling is over questions. Every function draws its resamples from
``numpy.random.default_rng(seed)`` as question indices, so two calls with
the same ``n``, ``n_boot`` and ``seed`` use the same resamples: CIs of
different systems computed with one seed are paired.

Bootstrap p-values are (1 + count) / (n_boot + 1), never 0, so their
resolution is 1 / (n_boot + 1): after Holm over m comparisons the smallest
corrected p is about m / n_boot. With the default 1000 resamples, ``***``
(p < .001) is out of reach and a family of more than ~50 comparisons can
show nothing significant; raise ``n_boot`` (e.g. 10_000) for such tables.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

N_BOOT = 1000
"""Bootstrap resamples (App. H does not state its count; 1000 is the common default)."""
LEVEL = 0.95
"""Confidence level of the intervals (App. H, Table 22: 95% bootstrap CI)."""
ALPHA = 0.05
"""Family-wise error rate for the Holm-corrected markers (App. H: * = p < .05)."""
MIN_PAIRED = 10
"""Fewest paired questions a metric is tested on. Below it no test is run and no marker printed: with one
question every resample is that question, its difference has no spread, and the bootstrap p reads as 0."""
_MAX_CELLS = 1 << 22  # resample x question indices held at once, bounding memory


@dataclass(frozen=True)
class Interval:
    """A mean with a percentile bootstrap interval."""

    mean: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class Comparison:
    """One paired test of ``system`` against ``reference`` on ``metric``."""

    system: str
    reference: str
    metric: str
    diff: Interval
    """Mean of (system - reference) per question, with its paired bootstrap CI."""
    p_value: float
    p_holm: float = float("nan")
    """``p_value`` after Holm-Bonferroni correction across the family it was tested in."""

    @property
    def marker(self) -> str:
        return significance_marker(self.p_holm, self.diff.mean)


def _resample_indices(n: int, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Yield blocks of bootstrap resamples, (b, n) question indices drawn with replacement, ``n_boot`` rows in all."""
    rng = np.random.default_rng(seed)
    block = max(1, _MAX_CELLS // max(n, 1))
    for start in range(0, n_boot, block):
        yield rng.integers(0, n, size=(min(block, n_boot - start), n))  # (b, n)


def bootstrap_means(values: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """Means of ``n_boot`` bootstrap resamples (over the last axis) of each row of ``values``.

    Shapes:
        values: (n,) or (S, n) per-question scores of S systems.
        returns: (n_boot,) or (S, n_boot); row s uses the same resamples for every s.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[-1]
    if n == 0:
        raise ValueError("cannot bootstrap an empty set of questions")
    blocks = [values[..., idx].mean(axis=-1) for idx in _resample_indices(n, n_boot, seed)]  # (..., b) each
    return np.concatenate(blocks, axis=-1)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL
) -> Interval:
    """Mean of ``values`` with its percentile bootstrap CI at ``level``.

    Shapes:
        values: (n,) per-question scores.
    """
    values = np.asarray(values, dtype=np.float64)
    means = bootstrap_means(values, n_boot, seed)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(values.mean()), float(low), float(high), int(values.size))


def paired_bootstrap_test(
    system: np.ndarray, reference: np.ndarray, n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL
) -> tuple[Interval, float]:
    """Two-sided paired bootstrap test of H0: mean(system - reference) = 0.

    Resamples the per-question differences d. The null distribution is the
    bootstrap distribution shifted to mean 0, so the p-value is
    (1 + #{b : |mean*_b - mean(d)| >= |mean(d)|}) / (n_boot + 1); identical
    systems give p = 1. Returns the mean difference with its CI, and p.

    Shapes:
        system, reference: (n,) per-question scores on the same questions.
    """
    system, reference = np.asarray(system, np.float64), np.asarray(reference, np.float64)
    if system.shape != reference.shape or system.ndim != 1:
        raise ValueError(f"paired scores must be 1-d arrays of one length, got {system.shape} and {reference.shape}")
    d = system - reference
    observed = float(d.mean())
    means = bootstrap_means(d, n_boot, seed)  # (n_boot,)
    extreme = np.abs(means - observed) >= abs(observed) - 1e-12
    p = (1 + int(extreme.sum())) / (n_boot + 1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(observed, float(low), float(high), int(d.size)), p


def paired_permutation_test(
    system: np.ndarray, reference: np.ndarray, n_resamples: int = 10_000, seed: int = 0
) -> float:
    """Two-sided paired permutation (sign-flip) test of mean(system - reference) = 0.

    Swaps the two systems' scores within random subsets of questions
    (``scipy.stats.permutation_test``, ``permutation_type="samples"``); exact
    when 2**n <= ``n_resamples``, Monte Carlo otherwise.

    Shapes:
        system, reference: (n,) per-question scores on the same questions.
    """
    system, reference = np.asarray(system, np.float64), np.asarray(reference, np.float64)
    if not np.any(system != reference):
        return 1.0
    result = stats.permutation_test(
        (system, reference),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(result.pvalue)


def holm_bonferroni(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the input order.

    With the m p-values sorted ascending, p_(i) becomes
    min(1, max_{j <= i} (m - j + 1) p_(j)); rejecting where the adjusted value
    is below alpha controls the family-wise error rate at alpha. NaNs are left
    NaN and not counted in m.

    Shapes:
        p_values: (m,); returns (m,).
    """
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full_like(p, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.size
    if m == 0:
        return out
    order = valid[np.argsort(p[valid], kind="stable")]
    scaled = p[order] * (m - np.arange(m))  # (m,) (m - j + 1) p_(j), j 1-based
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def significance_marker(p_holm: float, diff: float) -> str:
    """App. H markers seen from the reference: ``*``/``**``/``***`` when the reference is
    significantly better (p < .05/.01/.001), ``†`` when the system is significantly better."""
    if not p_holm < ALPHA:  # also NaN
        return ""
    if diff > 0:
        return "†"
    return "***" if p_holm < 0.001 else "**" if p_holm < 0.01 else "*"


def untested_metrics(
    scores: Mapping[str, Mapping[str, np.ndarray]], reference: str, metrics: Sequence[str], min_paired: int = MIN_PAIRED
) -> dict[str, int]:
    """Metric -> its number of paired questions, for the metrics :func:`compare_to_reference` leaves untested
    because fewer than ``min_paired`` questions pair the reference with the other systems."""
    counts = {m: len(scores[reference][m]) for m in metrics if m in scores.get(reference, {})}
    return {m: n for m, n in counts.items() if n < min_paired and len(scores) > 1}


def compare_to_reference(
    scores: Mapping[str, Mapping[str, np.ndarray]],
    reference: str,
    metrics: Sequence[str],
    n_boot: int = N_BOOT,
    seed: int = 0,
    method: str = "bootstrap",
    min_paired: int = MIN_PAIRED,
) -> list[Comparison]:
    """Paired tests of every other system against ``reference`` on each metric, Holm-corrected
    across the whole family (all systems x metrics), as in App. H.

    ``scores[system][metric]`` holds per-question scores, aligned across systems.
    A metric missing for a system or the reference is not tested, nor one with fewer than
    ``min_paired`` paired questions. ``method`` is
    ``"bootstrap"`` (App. H) or ``"permutation"``; the difference CI is always
    the paired bootstrap one.

    Shapes:
        scores[system][metric]: (n_metric,) with one n per metric for all systems.
    """
    if reference not in scores:
        raise ValueError(f"reference system {reference!r} is not among the systems {sorted(scores)}")
    if method not in ("bootstrap", "permutation"):
        raise ValueError(f"method must be 'bootstrap' or 'permutation', got {method!r}")
    comparisons: list[Comparison] = []
    for system in scores:
        if system == reference:
            continue
        for metric in metrics:
            if metric not in scores[system] or metric not in scores[reference]:
                continue
            x, y = np.asarray(scores[system][metric]), np.asarray(scores[reference][metric])
            if len(x) < min_paired:
                continue  # untested_metrics() names it, and the tables say why
            diff, p = paired_bootstrap_test(x, y, n_boot, seed)
            if method == "permutation":
                p = paired_permutation_test(x, y, seed=seed)
            comparisons.append(Comparison(system, reference, metric, diff, p))
    adjusted = holm_bonferroni([c.p_value for c in comparisons])
    return [
        Comparison(c.system, c.reference, c.metric, c.diff, c.p_value, float(a))
        for c, a in zip(comparisons, adjusted, strict=True)
    ]
