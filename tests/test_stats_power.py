"""Power planning, and simulations of the whole decision rule.

The simulations draw per-run medians from the log-normal model the formulas
assume, pick n with repeats_for_effect exactly as verification does, and run
the real decision rule (simulate_ab goes through compare's code). Seeded, so
deterministic; sized to run in a few seconds.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from infrarsi.stats import min_repeats, minimum_detectable_effect, repeats_for_effect
from simlab.ab import simulate_ab

sigmas = st.floats(min_value=0.001, max_value=0.2)
alphas = st.sampled_from([0.01, 0.05, 0.1])
ALPHA = 0.05
EFFECT = 0.05
MIN_EFFECT = 0.01
TRIALS = 1000


def test_min_repeats():
    assert min_repeats(0.05) == 4  # 3 vs 3: smallest exact p is 1/20 = 0.05, not < 0.05
    assert min_repeats(0.01) == 5
    assert min_repeats(0.001) == 7
    assert min_repeats(0.1) == 3


def test_nothing_is_detectable_below_min_repeats():
    assert minimum_detectable_effect(0.02, 3) == math.inf
    assert math.isfinite(minimum_detectable_effect(0.02, 4))


@given(sigmas, st.integers(4, 200), alphas)
@settings(max_examples=80, deadline=None)
def test_mde_decreases_with_n(sigma, n, alpha):
    assume(n >= min_repeats(alpha))
    assert minimum_detectable_effect(sigma, n + 1, alpha) < minimum_detectable_effect(sigma, n, alpha)


@given(sigmas, sigmas, st.integers(4, 200), st.floats(min_value=0.0, max_value=0.05))
@settings(max_examples=80, deadline=None)
def test_mde_increases_with_sigma(s1, s2, n, min_effect):
    assume(abs(s1 - s2) > 1e-6)
    lo, hi = sorted((s1, s2))
    assert (minimum_detectable_effect(lo, n, min_effect=min_effect)
            < minimum_detectable_effect(hi, n, min_effect=min_effect))


@given(sigmas, st.integers(4, 200))
@settings(max_examples=50, deadline=None)
def test_mde_grows_with_power_and_min_effect(sigma, n):
    assert minimum_detectable_effect(sigma, n, power=0.9) > minimum_detectable_effect(sigma, n, power=0.8)
    assert (minimum_detectable_effect(sigma, n, min_effect=0.01)
            > max(0.01, minimum_detectable_effect(sigma, n)))


def test_mde_is_min_effect_when_there_is_no_noise():
    assert minimum_detectable_effect(0.0, 10, min_effect=0.02) == pytest.approx(0.02)


@given(st.floats(min_value=0.0, max_value=0.1), st.floats(min_value=0.005, max_value=0.3),
       st.floats(min_value=0.0, max_value=0.02), alphas)
@settings(max_examples=100, deadline=None)
def test_repeats_for_effect_inverts_mde(sigma, effect, min_effect, alpha):
    n = repeats_for_effect(sigma, effect, alpha, min_effect=min_effect, n_max=500)
    floor = min_repeats(alpha)
    assert floor <= n <= 500
    if n < 500:
        assert minimum_detectable_effect(sigma, n, alpha, min_effect=min_effect) <= effect * (1 + 1e-12)
    if n > floor:
        assert minimum_detectable_effect(sigma, n - 1, alpha, min_effect=min_effect) > effect


def test_repeats_for_effect_caps_at_n_max():
    assert repeats_for_effect(0.2, 0.01, n_max=40) == 40
    assert repeats_for_effect(0.01, 0.01, min_effect=0.02, n_max=40) == 40  # effect below the bar
    assert repeats_for_effect(0.0, 0.05) == min_repeats(0.05)


@pytest.mark.parametrize("kwargs", [dict(sigma_log=-0.1), dict(alpha=0.6), dict(power=1.0), dict(effect=-0.1)])
def test_bad_planning_parameters_raise(kwargs):
    args = dict(sigma_log=0.02, effect=0.05) | kwargs
    with pytest.raises(ValueError):
        repeats_for_effect(**args)


def test_known_repeat_counts():
    """Pinned so that a change to the formula is a visible decision."""
    assert [repeats_for_effect(s, EFFECT, min_effect=MIN_EFFECT) for s in (0.01, 0.02, 0.03, 0.05)] == [4, 7, 13, 34]
    assert [repeats_for_effect(s, EFFECT) for s in (0.01, 0.02, 0.03, 0.05)] == [4, 5, 9, 22]


@pytest.mark.parametrize("sigma", [0.02, 0.035, 0.05])
@pytest.mark.parametrize("min_effect", [0.0, MIN_EFFECT])
def test_aa_false_promotion_rate_is_at_most_alpha(sigma, min_effect):
    n = repeats_for_effect(sigma, EFFECT, ALPHA, min_effect=MIN_EFFECT)
    rate = simulate_ab(sigma_log=sigma, true_speedup=1.0, n=n, trials=TRIALS,
                       min_effect=min_effect, alpha=ALPHA, seed=1, n_boot=500)
    assert rate <= ALPHA


@pytest.mark.parametrize("sigma", [0.02, 0.035, 0.05])
def test_true_5_percent_speedup_is_promoted_with_planned_power(sigma):
    n = repeats_for_effect(sigma, EFFECT, ALPHA, power=0.8, min_effect=MIN_EFFECT)
    rate = simulate_ab(sigma_log=sigma, true_speedup=1.0 + EFFECT, n=n, trials=2 * TRIALS,
                       min_effect=MIN_EFFECT, alpha=ALPHA, seed=2, n_boot=500)
    assert rate >= 0.8


def test_simulate_ab_is_deterministic_and_checks_inputs():
    kw = dict(sigma_log=0.03, true_speedup=1.03, n=8, trials=200, min_effect=0.0, n_boot=200)
    assert simulate_ab(**kw, seed=3) == simulate_ab(**kw, seed=3)
    with pytest.raises(ValueError):
        simulate_ab(**(kw | dict(true_speedup=0.0)))
    with pytest.raises(ValueError):
        simulate_ab(**(kw | dict(n=1)))
