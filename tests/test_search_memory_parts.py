"""The two-part memory model: peak = model states + activations, each log-linear, fitted censored."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.contract.model import Knob
from infrarsi.search.features import Priors, build_features
from infrarsi.search.memory_model import MemoryPosterior, fit_memory
from infrarsi.search.memory_parts import (
    ACTIVATIONS,
    STATES,
    PartsMemoryPosterior,
    _gauss_newton,
    _neg_log_posterior,
    column_parts,
    fit_memory_parts,
    part_prior,
    parts_by_feature,
)
from infrarsi.search.models import STEADY_SHARE_RANGE, baseline_states_share, fit_models
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

GiB = float(1 << 30)
NAMES = ("shard", "mb")  # shard: 0/1 (1 = states sharded 4x); mb: log2 micro-batch
PARTS = column_parts([STATES, ACTIVATIONS], (), ())


def true_peak(shard: float, mb: float) -> float:
    """20 GiB of states (5 when sharded) plus 4 GiB of activations per micro-batch."""
    return (20.0 / (4.0 if shard else 1.0) + 4.0 * 2.0 ** mb) * GiB


def fit(rows: list[tuple[float, float]], limit: float | None = None, *, parts: bool = True):
    x = np.asarray(rows, dtype=float)
    peaks = np.asarray([true_peak(*r) for r in rows])
    cens = peaks >= limit if limit else np.zeros(len(rows), dtype=bool)
    y = np.log(np.where(cens, limit or 0.0, peaks))
    kw = dict(names=NAMES, prior_mean=np.asarray([math.log(0.5), math.log(1.3)]), prior_sd=np.asarray([0.5, 0.3]),
              intercept=(math.log(24 * GiB), 1.5), noise=(0.03, 4.0))
    if parts:
        return fit_memory_parts(x, y, cens, parts=PARTS, n_main=2, **kw)
    return fit_memory(x, y, cens, **kw)


#: Measured: each change on its own, around the unsharded, mb=1 baseline.
ONE_AT_A_TIME = [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]


def test_the_sum_predicts_a_combination_the_product_gets_wrong() -> None:
    """Shard + a large micro-batch: the states shrink, the activations grow; they add, not multiply."""
    target = (1.0, 3.0)  # 5 + 32 = 37 GiB
    truth = math.log(true_peak(*target))
    two = fit(ONE_AT_A_TIME)
    one = fit(ONE_AT_A_TIME, parts=False)
    assert isinstance(two, PartsMemoryPosterior) and isinstance(one, MemoryPosterior)
    assert two.converged
    err_two = abs(float(two.predict(np.asarray([target]))[0][0]) - truth)
    err_one = abs(float(one.predict(np.asarray([target]))[0][0]) - truth)
    assert err_two < 0.08, err_two
    assert err_one > 2 * err_two, (err_one, err_two)
    assert two.states_share == pytest.approx(20 / 24, abs=0.05)
    assert two.baseline_bytes == pytest.approx(24 * GiB, rel=0.03)


def test_an_oom_is_censored_and_pushes_the_activation_part_up() -> None:
    limit = 30 * GiB
    measured = fit([(0, 0), (1, 0), (0, 1)])
    with_oom = fit([(0, 0), (1, 0), (0, 1), (0, 3)], limit)  # 52 GiB needed: killed at 30
    assert with_oom.n_censored == 1 and with_oom.n_exact == 3
    x = np.asarray([(0.0, 3.0)])
    assert with_oom.predict(x)[0][0] > math.log(limit) > measured.predict(x)[0][0] - 1.0
    assert with_oom.prob_fits(x, limit)[0] < 0.2


def test_prices_are_changes_of_the_sum_at_the_baseline() -> None:
    two = fit(ONE_AT_A_TIME)
    prices = {p.feature: p for p in two.prices()}
    assert prices["shard"].ratio == pytest.approx(9 / 24, rel=0.05)  # 5 + 4 against 20 + 4
    assert prices["mb"].ratio == pytest.approx(28 / 24, rel=0.05)
    effects = {e.feature: e for e in two.effects()}
    assert set(effects) == {"(intercept) [states]", "shard [states]", "(intercept) [activations]",
                            "mb [activations]"}
    assert math.exp(effects["mb [activations]"].post_mean) == pytest.approx(2.0, rel=0.1)  # the prior (x1.6) pulls a little


@pytest.mark.parametrize("seed", range(3))
def test_gradient_is_exact_and_the_gauss_newton_hessian_is_positive_definite(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.column_stack([rng.integers(0, 2, 12), rng.integers(0, 4, 12)]).astype(float)
    xt = np.hstack([np.ones((12, 1)), x])
    blocks = (xt[:, [0, 1]], xt[:, [0, 2]])
    y = rng.normal(23.0, 0.5, 12)
    cens = rng.random(12) < 0.3
    m0, s0 = rng.normal(0, 1, 4), np.full(4, 0.7)
    theta = np.concatenate([rng.normal(22.0, 0.3, 1), rng.normal(0, 0.3, 1), rng.normal(22.0, 0.3, 1),
                            rng.normal(0, 0.3, 1), [math.log(0.2)]])
    f, g = _neg_log_posterior(theta, blocks, y, cens, m0, s0, (0.03, 4.0))
    eps = 1e-6
    numeric = np.array([(_neg_log_posterior(theta + eps * e, blocks, y, cens, m0, s0, (0.03, 4.0))[0]
                         - _neg_log_posterior(theta - eps * e, blocks, y, cens, m0, s0, (0.03, 4.0))[0]) / (2 * eps)
                        for e in np.eye(len(theta))])
    assert np.allclose(g, numeric, rtol=1e-4, atol=1e-4)
    h = _gauss_newton(theta, blocks, y, cens, s0, (0.03, 4.0))
    assert np.all(np.linalg.eigvalsh(h[:-1, :-1]) > 0)


def test_part_prior_restates_a_total_ratio_for_one_part() -> None:
    mean, sd = part_prior(math.log(2.5), 0.6, 0.5)  # the whole peak x2.5 from a half share: that half x4
    assert math.exp(mean) == pytest.approx(4.0) and 0.6 <= sd <= 1.8
    mean, _ = part_prior(math.log(0.3), 0.2, 0.5)  # saving more than the part holds: floored, not negative
    assert math.exp(mean) == pytest.approx(0.05)
    assert part_prior(0.0, 0.1, 0.5) == pytest.approx((0.0, 0.2))  # ±10% of the whole is ±20% of half of it


def test_pairs_across_parts_have_no_term_and_an_untagged_feature_acts_on_both() -> None:
    parts = column_parts([STATES, ACTIVATIONS, None], squares=(1,), pairs=((0, 1), (0, 2), (1, 2)))
    both = frozenset({STATES, ACTIVATIONS})
    assert parts == [frozenset({STATES}), frozenset({ACTIVATIONS}), both, frozenset({ACTIVATIONS}),
                     frozenset(), frozenset({STATES}), frozenset({ACTIVATIONS})]
    with pytest.raises(ValueError, match="states, activations; got weights"):
        parts_by_feature(["a"], {"a": "weights"})


def test_fit_models_uses_the_two_part_model_only_when_the_priors_tag_a_feature() -> None:
    space = SearchSpace.from_contract([Knob(name="micro_batch", kind="int", default=1, values=(1, 2, 4, 8)),
                                       Knob(name="zero", kind="choice", default="3", values=("0", "3"))], [], [])
    records = [TrialRecord(run_id="r", trial_no=i, candidate=Candidate.of({"micro_batch": mb, "zero": z}),
                           outcome=Outcome.OK,
                           metrics=TrialMetrics(step_time_s=1.0, peak_mem_bytes=int(true_peak(z == "3", math.log2(mb)))),
                           cost_s=1.0)
               for i, (mb, z) in enumerate([(1, "3"), (2, "3"), (1, "0"), (4, "3")])]
    plain = Priors()
    tagged = Priors(memory_parts={"micro_batch": ACTIVATIONS, "zero=0": STATES})
    assert tagged.unknown_names(space) == [] and Priors(memory_parts={"zer0=0": STATES}).unknown_names(space) == ["zer0=0"]
    for priors, kind in ((plain, MemoryPosterior), (tagged, PartsMemoryPosterior)):
        models = fit_models(space, build_features(space, priors), priors, records, 64 * GiB)
        assert isinstance(models.memory, kind)
    combo = Candidate.of({"micro_batch": 8, "zero": "3"})
    models = fit_models(space, build_features(space, tagged), tagged, records, 64 * GiB)
    predicted = math.exp(float(models.memory.predict(models.design([combo]))[0][0]))
    assert predicted == pytest.approx(true_peak(1, 3), rel=0.15)


MiB = float(1 << 20)


def _cpu_baseline(steady: float | None, *, mb: int = 1, trial_no: int = 0, peak: float = 450 * MiB,
                  outcome: Outcome = Outcome.OK) -> TrialRecord:
    return TrialRecord(run_id="r", trial_no=trial_no, candidate=Candidate.of({"micro_batch": mb}), outcome=outcome,
                       metrics=TrialMetrics(step_time_s=1.0, peak_mem_bytes=int(peak),
                                            steady_mem_bytes=int(steady) if steady else None), cost_s=1.0)


def test_the_memory_a_cpu_baseline_holds_across_steps_sets_the_split_and_lets_larger_micro_batches_fit() -> None:
    """A CPU job's peak is mostly the runtime (400 MiB held across steps) and 50 MiB of activations; under a
    600 MiB limit micro-batches 2 and 4 fit (activations x1.7 per doubling). Given only the peak, half of it
    is taken for activations and those look risky; given the steady part too, they look safe, and
    micro-batch 16 (817 MiB) still does not."""
    space = SearchSpace.from_contract([Knob(name="micro_batch", kind="int", default=1, values=(1, 2, 4, 8, 16))],
                                      [], [])
    priors = Priors(memory={"micro_batch": (math.log(1.3), 0.2)}, memory_parts={"micro_batch": ACTIVATIONS})
    features = build_features(space, priors)
    cands = [Candidate.of({"micro_batch": b}) for b in (1, 2, 4, 8, 16)]
    peak_only = fit_models(space, features, priors, [_cpu_baseline(None)], 600 * MiB).prob_fits(cands)
    models = fit_models(space, features, priors, [_cpu_baseline(400 * MiB)], 600 * MiB)
    with_steady = models.prob_fits(cands)
    assert peak_only[1] < 0.6 and with_steady[1] > 0.95
    assert with_steady[2] > 0.75 and with_steady[4] < 0.5
    mb4 = math.exp(float(models.memory.predict(models.design([cands[2]]))[0][0]))
    assert mb4 == pytest.approx((400 + 50 * 1.7 ** 2) * MiB, rel=0.1)


def test_the_states_share_is_read_from_the_default_configurations_clean_ok_trials_only() -> None:
    space = SearchSpace.from_contract([Knob(name="micro_batch", kind="int", default=1, values=(1, 2, 4))], [], [])
    assert baseline_states_share(space, []) is None
    others = [_cpu_baseline(100 * MiB, mb=4, trial_no=1),                                # not the default
              _cpu_baseline(100 * MiB, trial_no=2, outcome=Outcome.OOM),                # censored peak
              _cpu_baseline(None, trial_no=3)]                                          # not sampled
    assert baseline_states_share(space, others) is None
    runs = [_cpu_baseline(s * MiB, trial_no=10 + i) for i, s in enumerate((360, 405, 400))]
    assert baseline_states_share(space, others + runs) == pytest.approx(400 / 450)  # the median
    low, high = STEADY_SHARE_RANGE
    assert baseline_states_share(space, [_cpu_baseline(449.9 * MiB)]) == high
    assert baseline_states_share(space, [_cpu_baseline(1 * MiB)]) == low
