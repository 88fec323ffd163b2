"""Descriptive statistics and the baseline noise profile."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infrarsi.stats import cv, median, noise_profile, sigma_log_upper

times = st.lists(st.floats(min_value=1e-4, max_value=10.0, allow_nan=False), min_size=2, max_size=40)


def test_median_odd_and_even():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, -2.0], [1.0, float("nan")], [1.0, math.inf]])
def test_times_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError):
        median(bad)


def test_cv_needs_two_values():
    with pytest.raises(ValueError):
        cv([1.0])


def test_cv_classical_and_robust_agree_on_normal_data():
    x = 0.1 * (1.0 + 0.03 * np.random.default_rng(0).standard_normal(20_000))
    assert cv(x) == pytest.approx(0.03, rel=0.03)
    assert cv(x, robust=True) == pytest.approx(0.03, rel=0.05)


def test_robust_cv_ignores_outlier_steps():
    x = list(0.1 * (1.0 + 0.02 * np.random.default_rng(1).standard_normal(200)))
    x[::25] = [1.0] * len(x[::25])  # 4% of steps ten times slower (GC, checkpoints)
    assert cv(x) > 0.5
    assert cv(x, robust=True) == pytest.approx(0.02, rel=0.25)


@given(times, st.floats(min_value=1e-3, max_value=1e3))
@settings(max_examples=60, deadline=None)
def test_cv_is_scale_free(x, scale):
    y = [v * scale for v in x]
    assert cv(y) == pytest.approx(cv(x), rel=1e-6, abs=1e-12)
    assert cv(y, robust=True) == pytest.approx(cv(x, robust=True), rel=1e-6, abs=1e-12)


def _runs(rng, *, n_runs, steps, between, within, mu=0.1):
    centres = mu * np.exp(between * rng.standard_normal(n_runs))
    return [c * np.exp(within * rng.standard_normal(steps)) for c in centres]


def test_noise_profile_recovers_between_run_noise():
    rng = np.random.default_rng(2)
    runs = _runs(rng, n_runs=200, steps=400, between=0.03, within=0.05)
    prof = noise_profile(runs)
    assert prof.n_runs == 200 and prof.steps_per_run == (400,) * 200
    assert prof.pooled_median == pytest.approx(0.1, rel=0.02)
    assert prof.within_cv == pytest.approx(0.05, rel=0.1)
    assert prof.within_sigma_log == pytest.approx(0.05, rel=0.1)
    # Run medians vary by the drift plus the median's own sampling error.
    expected = math.sqrt(0.03**2 + (math.pi / 2) * 0.05**2 / 400)
    assert prof.sigma_log == pytest.approx(expected, rel=0.15)
    assert prof.between_cv == pytest.approx(expected, rel=0.15)
    assert prof.sigma_log == prof.sigma_log_between > prof.sigma_log_floor


def test_noise_profile_floor_applies_when_runs_agree_by_chance():
    rng = np.random.default_rng(3)
    base = 0.1 * np.exp(0.05 * rng.standard_normal(100))
    runs = [base, base * 1.000001, base * 0.999999]  # medians nearly identical
    prof = noise_profile(runs)
    assert prof.sigma_log_between < prof.sigma_log_floor
    assert prof.sigma_log == prof.sigma_log_floor
    assert prof.sigma_log_floor == pytest.approx(math.sqrt(math.pi / 2) * prof.within_sigma_log / 10)


def test_noise_profile_needs_two_runs():
    with pytest.raises(ValueError):
        noise_profile([[0.1, 0.2, 0.3]])


def test_sigma_log_upper_is_conservative_and_shrinks_with_runs():
    rng = np.random.default_rng(4)
    few = noise_profile(_runs(rng, n_runs=3, steps=50, between=0.03, within=0.02))
    many = noise_profile(_runs(rng, n_runs=30, steps=50, between=0.03, within=0.02))
    assert sigma_log_upper(few) > few.sigma_log_between
    ratio_few = sigma_log_upper(few) / few.sigma_log_between
    ratio_many = sigma_log_upper(many) / many.sigma_log_between
    assert ratio_few == pytest.approx(2.12, rel=0.01)  # chi2 with 2 dof at 80%
    assert 1.0 < ratio_many < ratio_few
    assert sigma_log_upper(few, 0.95) > sigma_log_upper(few, 0.8)
