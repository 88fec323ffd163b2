"""The Bayesian linear time model: prior, posterior, noise, and a slow outlier under t noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.contract.model import Knob
from infrarsi.search.engine import SearchEngine
from infrarsi.search.features import Priors
from infrarsi.search.space import SearchSpace
from infrarsi.search.time_model import fit_time
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord
from tests.support.patches import patch

KNOBS = (Knob(name="compile", kind="bool", default=False, flag="--compile"),
         Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"), flag="--dtype"))
TRUE = {"compile=True": math.log(0.7), "dtype=bf16": math.log(0.6), "patch:a": math.log(0.9),
        "patch:b": math.log(1.1), "patch:c": math.log(0.95)}


def true_log_time(space: SearchSpace, c: Candidate) -> float:
    z = dict(zip(space.feature_names, space.encode(c)))
    return math.log(0.2) + sum(TRUE[k] * v for k, v in z.items())


def ok_record(i: int, c: Candidate, step: float, peak: int | None = None) -> TrialRecord:
    return TrialRecord(run_id="r", trial_no=i, candidate=c, outcome=Outcome.OK,
                       metrics=TrialMetrics(step_time_s=step, peak_mem_bytes=peak))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wrong_prior_is_corrected_by_15_trials(seed: int) -> None:
    space = SearchSpace.from_contract(KNOBS, (), (patch("a"), patch("b"), patch("c")))
    wrong = Priors(time={"compile=True": (math.log(2.0), 0.3)})  # "compile makes it 2x slower"
    engine = SearchEngine(space, wrong, seed=seed)
    before = {e.feature: e for e in engine.posterior_report().time_effects}["compile=True"]
    assert before.post_mean == pytest.approx(math.log(2.0))
    rng = np.random.default_rng(seed)
    points = space.sample(rng, 15)
    engine.observe([ok_record(i, c, math.exp(true_log_time(space, c) + 0.03 * rng.standard_normal()))
                    for i, c in enumerate(points)])
    after = {e.feature: e for e in engine.posterior_report().time_effects}["compile=True"]
    assert after.prior_mean == pytest.approx(math.log(2.0)) and after.prior_sd == pytest.approx(0.3)
    assert abs(after.post_mean - math.log(0.7)) < 0.1, after
    assert after.post_sd < after.prior_sd


def test_time_posterior_prior_and_believer() -> None:
    x = np.eye(3)
    prior_mean, prior_sd = np.array([-0.2, 0.1, 0.0]), np.array([0.1, 0.2, 0.3])
    empty = fit_time(np.zeros((0, 3)), np.zeros(0), names=("a", "b", "c"), prior_mean=prior_mean,
                     prior_sd=prior_sd, intercept=(0.0, 1.0))
    mu, var = empty.predict(x)
    np.testing.assert_allclose(mu, prior_mean)
    np.testing.assert_allclose(var, 1.0 + prior_sd ** 2)
    d_mu, d_var = empty.predict_difference(x, np.zeros(3))
    np.testing.assert_allclose(d_mu, prior_mean)
    np.testing.assert_allclose(d_var, prior_sd ** 2)  # the intercept cancels
    believed = empty.believe(x[0])
    assert believed.predict(x[:1])[1][0] < var[0]
    assert believed.predict(x[:1])[0][0] == pytest.approx(mu[0])
    effects = {e.feature: e for e in empty.effects()}
    assert effects["a"].prior_sd == pytest.approx(0.1) and effects["(intercept)"].prior_sd == pytest.approx(1.0)


def test_time_noise_is_estimated() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2, (60, 3)).astype(float)
    for true_sigma in (0.02, 0.2):
        y = -1.0 + x @ np.array([-0.3, 0.2, 0.1]) + true_sigma * rng.standard_normal(60)
        fit = fit_time(x, y, names=("a", "b", "c"), prior_mean=np.zeros(3), prior_sd=np.full(3, 1.0))
        assert fit.sigma == pytest.approx(true_sigma, rel=0.35)


def test_one_trial_far_slower_than_its_configuration_barely_moves_the_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A neighbour's job makes one trial 2.7x slower (the measured tinygpt table's first round ran up to
    0.3 log slower): under t noise the coefficients stay near the truth; Gaussian noise (no reweighting)
    would move the slow trial's features by a large part of its residual."""
    from infrarsi.search import time_model

    rng = np.random.default_rng(5)
    x = rng.integers(0, 2, (16, 4)).astype(float)
    beta = np.array([-0.3, 0.2, -0.1, 0.05])
    y = -1.0 + x @ beta + 0.03 * rng.standard_normal(16)
    slow = int(np.flatnonzero(x[:, 0] == 1)[0])
    y[slow] += 1.0

    def error() -> float:
        fit = fit_time(x, y, names=("a", "b", "c", "d"), prior_mean=np.zeros(4), prior_sd=np.full(4, 0.5))
        return float(np.max(np.abs(fit.mean[1:] - beta)))

    assert error() < 0.05
    monkeypatch.setattr(time_model, "T_ITERATIONS", 0)
    assert error() > 0.1
