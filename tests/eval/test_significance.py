import numpy as np
import pytest

from glmrag.eval import significance as sig
from glmrag.eval.significance import (
    bootstrap_ci,
    bootstrap_means,
    compare_to_reference,
    holm_bonferroni,
    paired_bootstrap_test,
    paired_permutation_test,
    significance_marker,
)


def test_holm_against_hand_computed():
    # sorted: .005*4 = .02, .01*3 = .03, .03*2 = .06, .04*1 = .04 -> running max .02 .03 .06 .06
    np.testing.assert_allclose(holm_bonferroni([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_skips_nan():
    out = holm_bonferroni([0.5, np.nan, 0.2])  # m = 2: .2*2 = .4, .5*1 -> max(.4, .5)
    np.testing.assert_allclose(out, [0.5, np.nan, 0.4])
    np.testing.assert_allclose(holm_bonferroni([0.6, 0.7]), [1.0, 1.0])
    assert holm_bonferroni([]).size == 0


def test_bootstrap_means_match_a_plain_loop():
    values = np.random.default_rng(3).random(40)
    rng = np.random.default_rng(7)
    expected = np.array([values[rng.integers(0, 40, size=40)].mean() for _ in range(200)])
    np.testing.assert_allclose(bootstrap_means(values, n_boot=200, seed=7), expected)


def test_bootstrap_blocks_do_not_change_resamples(monkeypatch):
    values = np.random.default_rng(0).random((2, 30))  # (S, n)
    whole = bootstrap_means(values, n_boot=100, seed=1)
    monkeypatch.setattr(sig, "_MAX_CELLS", 30 * 7)  # blocks of 7 resamples
    np.testing.assert_allclose(bootstrap_means(values, n_boot=100, seed=1), whole)
    assert whole.shape == (2, 100)


def test_bootstrap_ci_is_seeded_and_sized_right():
    values = np.random.default_rng(0).normal(0.5, 0.2, size=400)
    ci = bootstrap_ci(values, n_boot=2000, seed=0)
    assert ci == bootstrap_ci(values, n_boot=2000, seed=0)
    assert ci.low < ci.mean < ci.high and ci.n == 400
    expected_half_width = 1.96 * values.std() / np.sqrt(values.size)
    assert (ci.high - ci.low) / 2 == pytest.approx(expected_half_width, rel=0.15)


def test_identical_systems_give_p_one():
    x = np.random.default_rng(0).integers(0, 2, 50).astype(float)
    diff, p = paired_bootstrap_test(x, x)
    assert p == 1.0 and diff.mean == 0.0
    assert paired_permutation_test(x, x) == 1.0


def test_clearly_better_system_is_significant():
    rng = np.random.default_rng(1)
    reference = rng.random(100)
    better = np.clip(reference + 0.2 + rng.normal(0, 0.05, 100), 0, None)
    diff, p = paired_bootstrap_test(better, reference)
    assert p < 0.05 and p == pytest.approx(1 / 1001)
    assert diff.low > 0.15 and diff.mean == pytest.approx((better - reference).mean())
    assert paired_permutation_test(better, reference) < 0.05


def test_small_noisy_difference_is_not_significant():
    rng = np.random.default_rng(2)
    a, b = rng.random(30), rng.random(30)
    assert paired_bootstrap_test(a, b)[1] > 0.05


def test_exact_permutation_test():
    # 5 paired differences of +1: only the all-same sign flips reach |mean| = 1, so p = 2/32
    assert paired_permutation_test(np.ones(5), np.zeros(5)) == pytest.approx(2 / 32)


def test_markers_follow_app_h():
    assert significance_marker(0.0004, -0.1) == "***"
    assert significance_marker(0.004, -0.1) == "**"
    assert significance_marker(0.04, -0.1) == "*"
    assert significance_marker(0.04, 0.1) == "†"
    assert significance_marker(0.2, 0.1) == ""
    assert significance_marker(float("nan"), 0.1) == ""


def test_compare_to_reference_holm_over_family():
    rng = np.random.default_rng(4)
    ref = rng.random(80)
    scores = {
        "glm": {"r2": ref, "r5": ref},
        "same": {"r2": ref.copy(), "r5": ref.copy()},
        "worse": {"r2": ref - 0.3, "r5": ref - 0.3},
    }
    comps = compare_to_reference(scores, "glm", ["r2", "r5"], n_boot=500, seed=0)
    assert [(c.system, c.metric) for c in comps] == [("same", "r2"), ("same", "r5"), ("worse", "r2"), ("worse", "r5")]
    np.testing.assert_allclose([c.p_holm for c in comps], holm_bonferroni([c.p_value for c in comps]))
    assert all(c.p_holm == 1.0 for c in comps[:2])
    assert all(c.p_holm == pytest.approx(4 / 501) and c.marker == "**" for c in comps[2:])
    with pytest.raises(ValueError, match="reference system"):
        compare_to_reference(scores, "gnn", ["r2"])
