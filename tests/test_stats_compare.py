"""The A/B decision rule: compare() and its bootstrap."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from infrarsi.stats import Comparison, compare, min_exact_p
from infrarsi.stats.compare import _exact_tied_p, _resampled_medians, decide

run_medians = st.lists(st.floats(min_value=0.01, max_value=10.0, allow_nan=False), min_size=2, max_size=12)
FAST_BOOT = 400


def test_clear_speedup_is_promoted():
    base = [1.00, 1.01, 0.99, 1.02, 1.005, 0.995]
    cand = [0.95, 0.94, 0.96, 0.951, 0.97, 0.945]
    res = compare(base, cand, min_effect=0.01)
    assert res.significant
    assert res.speedup == pytest.approx(np.median(base) / np.median(cand))
    assert res.p_value == pytest.approx(min_exact_p(6, 6))
    assert res.mwu_method == "exact"
    assert 1.01 < res.ci_low <= res.speedup <= res.ci_high
    assert res.ci_level == pytest.approx(0.9)
    assert res.n_baseline == res.n_candidate == 6
    assert res.baseline == tuple(base) and res.candidate == tuple(cand)
    assert res.reason.startswith("promote")


def test_record_is_frozen():
    res = compare([1.0, 1.1, 1.2, 1.3], [1.0, 1.1, 1.2, 1.3], min_effect=0.0, n_boot=FAST_BOOT)
    assert isinstance(res, Comparison)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.significant = True  # type: ignore[misc]


def test_slower_candidate_is_not_promoted():
    res = compare([1.0, 1.01, 0.99, 1.02, 1.0], [1.1, 1.12, 1.09, 1.11, 1.1], min_effect=0.0)
    assert not res.significant and res.p_value > 0.9 and res.speedup < 1


def test_real_but_too_small_speedup_is_kept_out_by_min_effect():
    rng = np.random.default_rng(0)
    base = np.exp(0.002 * rng.standard_normal(12))
    cand = np.exp(0.002 * rng.standard_normal(12)) / 1.005  # 0.5% faster, very quiet
    assert compare(base, cand, min_effect=0.0).significant
    res = compare(base, cand, min_effect=0.01)
    assert not res.significant and res.p_value < 0.05
    assert "CI low" in res.reason and "not >" in res.reason


def test_three_runs_per_arm_can_never_be_significant_at_5_percent():
    # Complete separation and a 2x speedup: exact p is 1/20 = alpha, not below it.
    res = compare([1.0, 1.01, 1.02], [0.5, 0.51, 0.52], min_effect=0.0)
    assert res.p_value == pytest.approx(0.05)
    assert not res.significant
    assert "impossible at 3 vs 3" in res.reason
    # Four per arm can.
    assert compare([1.0, 1.01, 1.02, 1.03], [0.5, 0.51, 0.52, 0.53], min_effect=0.0).significant


def test_min_exact_p():
    assert min_exact_p(3, 3) == pytest.approx(1 / 20)
    assert min_exact_p(4, 4) == pytest.approx(1 / 70)
    assert min_exact_p(2, 5) == pytest.approx(1 / 21)


def test_ties_get_an_exact_p_value_and_all_equal_is_never_significant():
    res = compare([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], min_effect=0.0, n_boot=FAST_BOOT)
    assert res.mwu_method == "exact-ties" and res.p_value == 1.0 and not res.significant
    tied = compare([1.0, 1.0, 1.1, 1.2, 1.2], [0.8, 0.8, 0.9, 0.9, 1.0], min_effect=0.0)
    assert tied.mwu_method == "exact-ties"
    # Best possible ordering, but 2 of the 3 runs at 1.0 can be either arm: 3 of 252 splits.
    assert tied.p_value == pytest.approx(3 / 252) and tied.significant


@given(st.lists(st.integers(1, 4), min_size=2, max_size=6),
       st.lists(st.integers(1, 4), min_size=2, max_size=6))
@settings(max_examples=40, deadline=None)
def test_exact_tied_p_matches_brute_force_enumeration(base, cand):
    b, c = np.array(base, float), np.array(cand, float)
    ranks = scipy_stats.rankdata(np.concatenate([b, c]))
    observed = ranks[: b.size].sum()
    sums = [ranks[list(s)].sum() for s in itertools.combinations(range(ranks.size), b.size)]
    expected = np.mean(np.array(sums) >= observed - 1e-9)
    assert _exact_tied_p(b, c) == pytest.approx(expected, abs=1e-12)


def test_unequal_arms():
    res = compare([1.0, 1.02, 0.99, 1.01, 1.0, 1.03], [0.9, 0.91, 0.92, 0.9], min_effect=0.01)
    assert res.n_baseline == 6 and res.n_candidate == 4 and res.significant


@pytest.mark.parametrize("kwargs", [
    dict(min_effect=-0.01), dict(min_effect=0.0, alpha=0.0), dict(min_effect=0.0, alpha=0.5),
    dict(min_effect=0.0, n_boot=0), dict(min_effect=0.0, seed=-1),
])
def test_bad_parameters_raise(kwargs):
    with pytest.raises(ValueError):
        compare([1.0, 1.1, 1.2, 1.3], [1.0, 1.1, 1.2, 1.3], **kwargs)


def test_bad_times_raise():
    with pytest.raises(ValueError):
        compare([1.0, 0.0], [1.0, 1.0], min_effect=0.0)
    with pytest.raises(ValueError):
        compare([1.0], [1.0, 1.1], min_effect=0.0)  # one run says nothing about noise


@given(run_medians, run_medians, st.integers(0, 2**32 - 1))
@settings(max_examples=25, deadline=None)
def test_deterministic_for_a_seed(base, cand, seed):
    a = compare(base, cand, min_effect=0.01, n_boot=FAST_BOOT, seed=seed)
    b = compare(base, cand, min_effect=0.01, n_boot=FAST_BOOT, seed=seed)
    assert a == b


@pytest.mark.parametrize("ties", [False, True])
def test_seed_only_moves_the_bootstrap(ties):
    rng = np.random.default_rng(5)
    base, cand = np.exp(0.03 * rng.standard_normal(10)), np.exp(0.03 * rng.standard_normal(10))
    if ties:
        base, cand = np.round(base, 2), np.round(cand, 2)
    a, b = compare(base, cand, min_effect=0.0, seed=1), compare(base, cand, min_effect=0.0, seed=2)
    assert a.p_value == b.p_value and a.speedup == b.speedup
    assert a.ci_low != b.ci_low


@given(run_medians, st.floats(min_value=0.0, max_value=0.1), st.integers(0, 1000))
@settings(max_examples=30, deadline=None)
def test_identical_inputs_are_never_significant(x, min_effect, seed):
    res = compare(x, list(x), min_effect=min_effect, n_boot=FAST_BOOT, seed=seed)
    assert not res.significant
    assert res.speedup == 1.0 and res.p_value >= 0.5


@given(run_medians, run_medians, st.floats(min_value=1e-3, max_value=1e3))
@settings(max_examples=25, deadline=None)
def test_scale_free(base, cand, scale):
    a = compare(base, cand, min_effect=0.01, n_boot=FAST_BOOT)
    b = compare([v * scale for v in base], [v * scale for v in cand], min_effect=0.01, n_boot=FAST_BOOT)
    assert b.significant == a.significant
    assert b.p_value == pytest.approx(a.p_value)
    assert b.ci_low == pytest.approx(a.ci_low) and b.speedup == pytest.approx(a.speedup)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10])
def test_fast_resampled_median_matches_naive_resampling(n):
    """The O(1) order-statistic sampler has the distribution of real resampling."""
    x = np.sort(np.random.default_rng(n).lognormal(size=n))
    draws = 100_000
    fast = _resampled_medians(x[None, :], draws, np.random.default_rng(1))[0]
    naive = np.median(x[np.random.default_rng(2).integers(0, n, size=(draws, n))], axis=1)
    support = np.union1d(fast, naive)
    assert np.all(np.isin(fast, naive)) or n > 8  # same support (all pairs seen for small n)
    gap = max(abs(np.mean(fast <= v) - np.mean(naive <= v)) for v in support)
    assert gap < 0.01  # KS distance; sampling noise alone is about 0.004


def test_batched_rule_matches_compare():
    """simulate_ab runs the batched rule; its deterministic parts must equal compare's."""
    rng = np.random.default_rng(6)
    base, cand = np.exp(0.03 * rng.standard_normal((20, 8))), np.exp(0.03 * rng.standard_normal((20, 8)))
    batch = decide(base, cand, min_effect=0.0, alpha=0.05, n_boot=FAST_BOOT, seed=0)
    for i in range(20):
        res = compare(base[i], cand[i], min_effect=0.0, n_boot=FAST_BOOT)
        assert batch.p_value[i] == pytest.approx(res.p_value)
        assert batch.speedup[i] == pytest.approx(res.speedup)


@pytest.mark.parametrize("n", [5, 12])
def test_ci_covers_true_ratio_at_about_nominal_rate(n):
    """90% interval (alpha = 0.05) contains the true speedup in roughly 90% of cases."""
    rng = np.random.default_rng(100 + n)
    true, sigma, trials = 1.05, 0.03, 300
    hits = low_misses = 0
    for i in range(trials):
        base = np.exp(sigma * rng.standard_normal(n))
        cand = np.exp(sigma * rng.standard_normal(n)) / true
        res = compare(base, cand, min_effect=0.0, n_boot=500, seed=i)
        hits += res.ci_low < true < res.ci_high
        low_misses += res.ci_low >= true
    coverage = hits / trials
    # Measured over 4,000 trials: 0.92-0.94, slightly conservative.
    assert 0.85 <= coverage <= 0.97
    # The one-sided lower bound, the part that decides promotion, errs at most alpha-ish.
    assert low_misses / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


def test_large_samples_use_the_normal_approximation():
    rng = np.random.default_rng(7)
    base, cand = np.exp(0.03 * rng.standard_normal(101)), np.exp(0.03 * rng.standard_normal(101)) / 1.02
    res = compare(base, cand, min_effect=0.0, n_boot=FAST_BOOT)
    assert res.mwu_method == "asymptotic" and res.significant
    tied = compare(np.round(base[:60], 2), np.round(cand[:60], 2), min_effect=0.0, n_boot=FAST_BOOT)
    assert tied.mwu_method == "asymptotic"
    exact = compare(base[:50], cand[:50], min_effect=0.0, n_boot=FAST_BOOT)
    approx = scipy_stats.mannwhitneyu(base[:50], cand[:50], alternative="greater").pvalue
    assert exact.mwu_method == "exact" and exact.p_value == pytest.approx(approx, abs=2e-3)
