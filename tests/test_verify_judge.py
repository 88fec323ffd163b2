"""The verdict logic on synthetic trial records: every verdict kind, every invariant, and A/A behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from infrarsi.loss_band import calibrate, final_loss_worse, first_step_outside
from infrarsi.stats import repeats_for_effect
from infrarsi.trial import Candidate, Outcome, TrialMetrics, TrialRecord
from infrarsi.verify import VerdictKind, VerifyPolicy, judge

LOSS = (5.0, 4.8, 4.6, 4.5, 4.4, 4.3)
BAND = calibrate([LOSS, tuple(v + 0.001 for v in LOSS)], rtol=0.02, final_rtol=0.01)
CAND = Candidate.of({"dtype": "bf16"})
BASE = Candidate.of({"dtype": "fp32"})


def record(no: int, step: float, *, cand: Candidate = CAND, loss: tuple[float, ...] = LOSS,
           outcome: Outcome = Outcome.OK, reason: str = "", child: float | None = None) -> TrialRecord:
    times = tuple(step * f for f in (1.0, 1.01, 0.99, 1.0, 1.02, 0.98))
    return TrialRecord(run_id="r", trial_no=no, candidate=cand, outcome=outcome, reason=reason,
                       metrics=TrialMetrics(step_time_s=step, step_time_cv=0.01, step_times_s=times,
                                            tokens_per_step=128, loss=loss, wall_s=sum(times) + 2.0,
                                            child_step_time_s=step if child is None else child))


def arms(base: list[float], cand: list[float], **kw) -> tuple[list[TrialRecord], list[TrialRecord]]:
    b = [record(2 * i + 1, s, cand=BASE) for i, s in enumerate(base)]
    c = [record(2 * i + 2, s, **kw) for i, s in enumerate(cand)]
    return b, c


def test_a_clear_speedup_is_promoted() -> None:
    b, c = arms([1.0, 1.01, 0.99, 1.0, 1.02, 0.98], [0.6, 0.61, 0.59, 0.6, 0.62, 0.6])
    v = judge(b, c, band=BAND)
    assert v.kind is VerdictKind.PROMOTED, v.reason
    assert v.speedup == pytest.approx(1.0 / 0.6, rel=0.02)
    assert v.comparison is not None and v.comparison.ci_low > 1.01
    assert {i.name for i in v.invariants} >= {"outcome", "tokens_per_step", "lock", "loss_band", "final_loss", "clock"}
    assert v.to_dict()["verdict"] == "promoted"


def test_the_baseline_against_itself_is_not_promoted() -> None:
    same = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]
    b, c = arms(same, list(same))
    assert judge(b, c, band=BAND).kind is VerdictKind.NOT_SIGNIFICANT


def test_aa_false_promotion_rate_is_at_most_alpha_with_calibrated_noise() -> None:
    rng = np.random.default_rng(7)
    sigma = 0.03
    n = repeats_for_effect(sigma, 0.05, 0.05, 0.8, min_effect=0.01)
    promoted = 0
    trials = 300
    for _ in range(trials):
        base = list(np.exp(rng.normal(0, sigma, n)))
        cand = list(np.exp(rng.normal(0, sigma, n)))
        b, c = arms(base, cand)
        promoted += judge(b, c, band=BAND, policy=VerifyPolicy(n_boot=400)).promoted
    assert promoted / trials <= 0.05


def test_a_loss_that_leaves_the_band_is_invalid_and_names_the_step() -> None:
    scaled = tuple(v * 1.1 for v in LOSS)
    b, c = arms([1.0] * 4, [0.6] * 4, loss=scaled)
    v = judge(b, c, band=BAND)
    assert v.kind is VerdictKind.INVALID
    assert "measured step 1 left the baseline loss band" in v.reason


def test_a_drift_late_in_the_curve_names_that_step() -> None:
    drift = LOSS[:4] + (LOSS[4] * 1.05, LOSS[5] * 1.05)
    assert first_step_outside(BAND, drift) == 5
    assert final_loss_worse(BAND, drift) == pytest.approx(0.05, rel=0.01)


def test_a_failed_candidate_trial_is_invalid_with_its_reason() -> None:
    b, c = arms([1.0] * 4, [0.6] * 4, outcome=Outcome.INVALID,
                reason="step 3 processed 64 tokens; the contract fixes 128 per step")
    v = judge(b, c, band=BAND)
    assert v.kind is VerdictKind.INVALID and "processed 64 tokens" in v.reason


def test_a_job_whose_clock_claims_ten_times_faster_is_invalid() -> None:
    b, c = arms([1.0] * 4, [1.0] * 4, child=0.1)
    v = judge(b, c, band=BAND)
    assert v.kind is VerdictKind.INVALID and v.reason.startswith("clock:")


def test_an_implausible_speedup_is_quarantined() -> None:
    b, c = arms([1.0] * 5, [0.05] * 5)
    v = judge(b, c, band=BAND, policy=VerifyPolicy(max_speedup=10.0))
    assert v.kind is VerdictKind.QUARANTINED and "plausibility" in v.reason


def test_more_flops_than_the_device_has_is_quarantined() -> None:
    b, c = arms([1.0] * 5, [0.5] * 5)
    v = judge(b, c, band=BAND, peak_flops=1e12, model_flops_per_step=1e12)
    assert v.kind is VerdictKind.QUARANTINED and "above this device's measured peak" in v.reason


def test_band_width_is_at_least_the_contract_tolerance() -> None:
    band = calibrate([LOSS, LOSS, LOSS], rtol=0.02, final_rtol=0.01)
    assert band.upper[0] == pytest.approx(LOSS[0] * 1.02)
    noisy = calibrate([LOSS, tuple(v + 0.5 for v in LOSS)], rtol=0.02, final_rtol=0.01)
    assert noisy.upper[0] - noisy.mean[0] > 0.02 * LOSS[0]
