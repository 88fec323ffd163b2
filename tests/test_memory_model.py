"""The Tobit memory model: censored fits, exact derivatives, a noise that stays off zero."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infrarsi.search.features import noise_log_prior
from infrarsi.search.memory_model import fit_memory, hessian, neg_log_posterior

BETA = np.array([0.5, 0.3, -0.4, 0.6])
WEAK = dict(names=("a", "b", "c", "d"), prior_mean=np.zeros(4), prior_sd=np.full(4, 10.0), intercept=(0.0, 10.0),
            noise=(0.1, 1.0))


def censored_data(seed: int, n: int = 200, sigma: float = 0.4, censored: float = 0.3):
    """Log peaks from a known linear model, right-censored at their (1 - censored) quantile."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([rng.normal(0, 1, n), rng.normal(0, 1, n), rng.normal(0, 1, n),
                         rng.integers(0, 2, n)]).astype(float)
    y = 2.0 + x @ BETA + sigma * rng.standard_normal(n)
    limit = np.quantile(y, 1 - censored)
    cens = y >= limit
    return x, np.where(cens, limit, y), cens


def rel_error(beta_hat: np.ndarray) -> float:
    return float(np.linalg.norm(beta_hat - BETA) / np.linalg.norm(BETA))


def test_tobit_recovers_coefficients_and_dropping_oom_is_worse() -> None:
    tobit, dropped = [], []
    for seed in range(6):
        x, y, cens = censored_data(seed)
        assert cens.mean() == pytest.approx(0.3, abs=0.01)
        fit = fit_memory(x, y, cens, **WEAK)
        assert fit.converged and fit.n_censored == cens.sum()
        tobit.append(rel_error(fit.mean[1:]))
        drop = fit_memory(x[~cens], y[~cens], cens[~cens], **WEAK)
        dropped.append(rel_error(drop.mean[1:]))
    tobit_err, drop_err = np.array(tobit), np.array(dropped)
    assert tobit_err.mean() < 0.10, tobit_err
    assert (drop_err > tobit_err).all(), (tobit_err, drop_err)  # worse on every seed...
    assert drop_err.mean() > 2 * tobit_err.mean(), (tobit_err, drop_err)  # ...and twice as bad on average


def test_tobit_prob_fits_matches_the_truth() -> None:
    from scipy.stats import norm

    x, y, cens = censored_data(0)
    limit = float(y[cens][0])
    truth = norm.cdf((limit - 2.0 - x @ BETA) / 0.4)  # P(a new run at x fits)
    fit = fit_memory(x, y, cens, **WEAK)
    drop = fit_memory(x[~cens], y[~cens], cens[~cens], **WEAK)
    tobit_err = np.abs(fit.prob_fits(x, math.exp(limit)) - truth).mean()
    drop_err = np.abs(drop.prob_fits(x, math.exp(limit)) - truth).mean()
    assert tobit_err < 0.04
    assert drop_err > 2 * tobit_err
    assert fit.prob_fits(x[:3], None).tolist() == [1.0, 1.0, 1.0]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), log_sigma=st.floats(-3.0, 0.5))
def test_tobit_gradient_and_hessian_are_exact(seed: int, log_sigma: float) -> None:
    x, y, cens = censored_data(seed, n=30)
    xt = np.hstack([np.ones((30, 1)), x])
    rng = np.random.default_rng(seed)
    theta = np.concatenate([rng.normal(2, 0.5, 1), BETA + rng.normal(0, 0.3, 4), [log_sigma]])
    m0, s0, noise = np.zeros(5), np.full(5, 3.0), (0.1, 4.0)
    f, g = neg_log_posterior(theta, xt, y, cens, m0, s0, noise)
    h = hessian(theta, xt, y, cens, s0, noise)
    eps = 1e-6
    for i in range(len(theta)):
        e = np.zeros_like(theta)
        e[i] = eps
        fp, gp = neg_log_posterior(theta + e, xt, y, cens, m0, s0, noise)
        fm, gm = neg_log_posterior(theta - e, xt, y, cens, m0, s0, noise)
        assert g[i] == pytest.approx((fp - fm) / (2 * eps), rel=1e-4, abs=1e-4)
        np.testing.assert_allclose(h[:, i], (gp - gm) / (2 * eps), rtol=1e-4, atol=1e-3)


def test_noise_prior_derivatives() -> None:
    for tau in (-4.0, -1.0, 0.5):
        v, d1, d2 = noise_log_prior(tau, 0.05, 4.0)
        eps = 1e-5
        assert d1 == pytest.approx((noise_log_prior(tau + eps, 0.05, 4.0)[0] -
                                    noise_log_prior(tau - eps, 0.05, 4.0)[0]) / (2 * eps), rel=1e-5)
        assert d2 == pytest.approx((noise_log_prior(tau + eps, 0.05, 4.0)[1] -
                                    noise_log_prior(tau - eps, 0.05, 4.0)[1]) / (2 * eps), rel=1e-5)


def test_memory_sigma_stays_off_zero_with_few_trials() -> None:
    # as many coefficients as exact observations: an unregularised sigma would collapse to 0
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, (6, 6)).astype(float)
    y = 20 + x @ rng.normal(0, 0.2, 6)
    fit = fit_memory(x, y, np.zeros(6, bool), names=tuple("abcdef"), prior_mean=np.zeros(6),
                     prior_sd=np.full(6, 0.3), intercept=(20.0, 3.0))
    assert fit.sigma > 0.005
