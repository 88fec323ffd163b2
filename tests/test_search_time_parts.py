"""The two-part time model: step = compute + exposed communication, each log-linear, and its fallback."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.contract.model import Knob
from infrarsi.search.features import Priors, build_features
from infrarsi.search.memory_parts import column_parts
from infrarsi.search.models import fit_models
from infrarsi.search.space import SearchSpace
from infrarsi.search.time_model import TimePosterior, fit_time
from infrarsi.search.time_parts import COMMUNICATION, COMPUTE, TIME_PARTS, PartsTimePosterior, fit_time_parts
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

NAMES = ("no_recompute", "zero1")  # 0/1 each: drop recomputation (compute); ZeRO-1 instead of 3 (communication)
PARTS = column_parts([COMPUTE, COMMUNICATION], (), (), TIME_PARTS)


def true_time(no_recompute: float, zero1: float) -> float:
    """8 s of compute (6 without recomputation) plus 6 s of exposed ZeRO-3 traffic (0.5 s with ZeRO-1)."""
    return (6.0 if no_recompute else 8.0) + (0.5 if zero1 else 6.0)


def fit(rows: list[tuple[float, float]], *, parts: bool = True) -> PartsTimePosterior | TimePosterior:
    x = np.asarray(rows, dtype=float)
    y = np.log([true_time(*r) for r in rows])
    kw = dict(names=NAMES, prior_mean=np.asarray([math.log(0.85), math.log(0.7)]), prior_sd=np.asarray([0.15, 0.3]),
              noise=(0.05, 2.0))
    if parts:
        return fit_time_parts(x, y, parts=PARTS, n_main=2, intercept=(float(np.mean(y)), 1.5), **kw)
    return fit_time(x, y, **kw)


def test_the_sum_predicts_a_combination_the_product_gets_wrong() -> None:
    """Removing most communication leaves compute as the floor: the two savings add, they do not multiply."""
    seen = [(0, 0), (1, 0), (0, 1), (0, 0)]
    truth = math.log(true_time(1, 1))  # 6.5 s
    two, one = fit(seen), fit(seen, parts=False)
    assert isinstance(two, PartsTimePosterior) and isinstance(one, TimePosterior)
    err_two = abs(float(two.predict(np.asarray([[1.0, 1.0]]))[0][0]) - truth)
    err_one = abs(float(one.predict(np.asarray([[1.0, 1.0]]))[0][0]) - truth)
    assert err_two < 0.05, err_two
    assert err_one > 2 * err_two, (err_one, err_two)
    assert two.compute_share == pytest.approx(8 / 14, abs=0.1)  # 3 configurations, 4 coefficients: partly prior
    assert math.exp(two.baseline_log_time) == pytest.approx(14.0, rel=0.03)


def test_difference_and_believer_follow_the_fitted_sum() -> None:
    post = fit([(0, 0), (1, 0)])
    x = np.asarray([[0.0, 1.0], [1.0, 1.0]])
    ref = np.asarray([0.0, 0.0])
    mu, var = post.predict(x)
    mu_ref, _ = post.predict(ref[None, :])
    d_mu, d_var = post.predict_difference(x, ref)
    assert np.allclose(d_mu, mu - mu_ref[0])
    assert np.all(d_var >= 0) and post.predict_difference(ref[None, :], ref)[1][0] == pytest.approx(0.0, abs=1e-12)
    believed = post.believe(x[0])
    mu_b, var_b = believed.predict(x)
    assert np.allclose(mu_b, mu)  # a fantasy at its own prediction moves no mean
    assert var_b[0] < 0.5 * var[0] and var_b[1] <= var[1] + 1e-12


def _records(space: SearchSpace) -> list[TrialRecord]:
    rows = [("full", "3"), ("none", "3"), ("full", "1"), ("full", "3")]
    return [TrialRecord(run_id="r", trial_no=i, candidate=Candidate.of({"recompute": rc, "zero": z}),
                        outcome=Outcome.OK, metrics=TrialMetrics(step_time_s=true_time(rc == "none", z == "1")),
                        cost_s=1.0)
            for i, (rc, z) in enumerate(rows)]


def test_fit_models_uses_the_sum_only_when_the_priors_tag_both_parts() -> None:
    space = SearchSpace.from_contract([Knob(name="recompute", kind="choice", default="full", values=("full", "none")),
                                       Knob(name="zero", kind="choice", default="3", values=("1", "3"))], [], [])
    both = Priors(time_parts={"recompute=none": COMPUTE, "zero=1": COMMUNICATION})
    compute_only = Priors(time_parts={"recompute=none": COMPUTE})  # e.g. CPU knobs: nothing moves communication
    assert both.unknown_names(space) == [] and Priors(time_parts={"zer0=1": COMPUTE}).unknown_names(space) == ["zer0=1"]
    records = _records(space)
    for priors, kind in ((Priors(), TimePosterior), (compute_only, TimePosterior), (both, PartsTimePosterior)):
        models = fit_models(space, build_features(space, priors), priors, records, None)
        assert isinstance(models.time, kind)
        # nothing measured yet: the priors alone rank changes by the single model
        assert isinstance(fit_models(space, build_features(space, priors), priors, [], None).time, TimePosterior)
    models = fit_models(space, build_features(space, both), both, records, None)
    combo = Candidate.of({"recompute": "none", "zero": "1"})
    assert math.exp(float(models.predict_time([combo])[0][0])) == pytest.approx(true_time(1, 1), rel=0.1)


def test_an_unknown_time_part_is_refused() -> None:
    space = SearchSpace.from_contract([Knob(name="zero", kind="choice", default="3", values=("1", "3"))], [], [])
    bad = Priors(time_parts={"zero=1": "network"})
    with pytest.raises(ValueError, match="time part must be one of compute, communication; got network"):
        fit_models(space, build_features(space, bad), bad, [], None)
