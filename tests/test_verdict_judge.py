"""The verdict logic on synthetic trial records: every verdict kind, every invariant, and A/A behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from infrarsi.invariants import WITNESS_ROWS, CheckStatus
from infrarsi.loss_band import calibrate, final_loss_worse, first_step_outside
from infrarsi.stats import repeats_for_effect
from infrarsi.trial_record import Candidate, Outcome, TrialRecord
from infrarsi.verdict import Reference, Verdict, VerdictKind, VerifyPolicy, judge
from tests.support.witnessed import reference, trial

LOSS = (5.0, 4.8, 4.6, 4.5, 4.4, 4.3)
BAND = calibrate([LOSS, tuple(v + 0.001 for v in LOSS)], rtol=0.02, final_rtol=0.01)
REF = reference(BAND)
CAND = Candidate.of({"dtype": "bf16"})
BASE = Candidate.of({"dtype": "fp32"})


def record(no: int, step: float, *, cand: Candidate = CAND, loss: tuple[float, ...] = LOSS, **kw) -> TrialRecord:
    return trial(no, step, cand=cand, loss=loss, **kw)


def arms(base: list[float], cand: list[float], **kw) -> tuple[list[TrialRecord], list[TrialRecord]]:
    b = [record(2 * i + 1, s, cand=BASE) for i, s in enumerate(base)]
    c = [record(2 * i + 2, s, **kw) for i, s in enumerate(cand)]
    return b, c


def test_a_clear_speedup_is_promoted() -> None:
    b, c = arms([1.0, 1.01, 0.99, 1.0, 1.02, 0.98], [0.6, 0.61, 0.59, 0.6, 0.62, 0.6])
    v = judge(b, c, reference=REF)
    assert v.kind is VerdictKind.PROMOTED, v.reason
    assert v.speedup == pytest.approx(1.0 / 0.6, rel=0.02)
    assert v.comparison is not None and v.comparison.ci_low > 1.01
    assert {i.name for i in v.invariants} >= {"outcome", "tokens_per_step", "lock", "optimizer_steps", "work",
                                              "precision", "trainable", "first_step", "weights", "loss_band",
                                              "final_loss", "clock"}
    assert all(i.status is CheckStatus.OK for i in v.invariants)
    assert v.to_dict()["verdict"] == "promoted"
    assert Verdict.from_dict(v.to_dict()) == v


def test_the_baseline_against_itself_is_not_promoted() -> None:
    same = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]
    b, c = arms(same, list(same))
    assert judge(b, c, reference=REF).kind is VerdictKind.NOT_SIGNIFICANT


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
        promoted += judge(b, c, reference=REF, policy=VerifyPolicy(n_boot=400)).promoted
    assert promoted / trials <= 0.05


def test_a_loss_that_leaves_the_band_is_invalid_and_names_the_step() -> None:
    scaled = tuple(v * 1.1 for v in LOSS)
    b, c = arms([1.0] * 4, [0.6] * 4, loss=scaled)
    v = judge(b, c, reference=REF)
    assert v.kind is VerdictKind.INVALID
    assert "measured step 1 left the baseline loss band" in v.reason


def test_a_drift_late_in_the_curve_names_that_step() -> None:
    drift = LOSS[:4] + (LOSS[4] * 1.05, LOSS[5] * 1.05)
    assert first_step_outside(BAND, drift) == 5
    assert final_loss_worse(BAND, drift) == pytest.approx(0.05, rel=0.01)


def test_a_failed_candidate_trial_is_invalid_with_its_reason() -> None:
    b, c = arms([1.0] * 4, [0.6] * 4, outcome=Outcome.INVALID,
                reason="step 3 processed 64 tokens; the contract fixes 128 per step")
    v = judge(b, c, reference=REF)
    assert v.kind is VerdictKind.INVALID and "processed 64 tokens" in v.reason


def test_a_job_whose_clock_claims_ten_times_faster_is_invalid() -> None:
    b, c = arms([1.0] * 4, [1.0] * 4, child=0.1)
    v = judge(b, c, reference=REF)
    assert v.kind is VerdictKind.INVALID and v.reason.startswith("clock:")


def test_an_implausible_speedup_is_quarantined() -> None:
    b, c = arms([1.0] * 5, [0.05] * 5)
    v = judge(b, c, reference=REF, policy=VerifyPolicy(max_speedup=10.0))
    assert v.kind is VerdictKind.QUARANTINED and "plausibility" in v.reason


def test_more_flops_than_the_device_has_is_quarantined() -> None:
    b, c = arms([1.0] * 5, [0.5] * 5)
    v = judge(b, c, reference=REF, peak_flops=1e12, model_flops_per_step=1e12)
    assert v.kind is VerdictKind.QUARANTINED and "above this device's measured peak" in v.reason


def test_band_width_is_at_least_the_contract_tolerance() -> None:
    band = calibrate([LOSS, LOSS, LOSS], rtol=0.02, final_rtol=0.01)
    assert band.upper[0] == pytest.approx(LOSS[0] * 1.02)
    noisy = calibrate([LOSS, tuple(v + 0.5 for v in LOSS)], rtol=0.02, final_rtol=0.01)
    assert noisy.upper[0] - noisy.mean[0] > 0.02 * LOSS[0]


FAST = ([1.0, 1.01, 0.99, 1.0, 1.02, 0.98], [0.6, 0.61, 0.59, 0.6, 0.62, 0.6])


def test_a_clear_speedup_that_an_executor_could_not_witness_is_unverified_never_promoted() -> None:
    b, c = arms(*FAST, witnessed=False, executor="actions", skipped="the runner's witness is not this bot's")
    v = judge(b, c, reference=REF)
    assert v.kind is VerdictKind.UNVERIFIED and not v.promoted
    assert v.reason.startswith("could not be verified on the actions executor: optimizer_steps, work, ")
    assert "the runner's witness is not this bot's" in v.reason and "[verify] waive" in v.reason
    rows = {i.name: i for i in v.invariants}
    assert rows["work"].status is CheckStatus.NOT_CHECKED and not rows["work"].ok
    assert v.speedup is not None  # measured and shown, not promoted


def test_a_waived_check_that_could_not_run_lets_the_verdict_through_and_says_so() -> None:
    b, c = arms(*FAST, witnessed=False, skipped="not on this executor")
    rows = WITNESS_ROWS
    v = judge(b, c, reference=REF, policy=VerifyPolicy(waive=rows))
    assert v.kind is VerdictKind.PROMOTED, v.reason
    assert all(i.waived and i.status is CheckStatus.NOT_CHECKED for i in v.invariants if i.name in rows)


def test_a_waiver_never_excuses_a_broken_check() -> None:
    b, c = arms(*FAST, loss=tuple(v * 1.1 for v in LOSS))
    v = judge(b, c, reference=REF, policy=VerifyPolicy(waive=("loss_band", "final_loss")))
    assert v.kind is VerdictKind.INVALID and v.reason.startswith("loss_band:")


@pytest.mark.parametrize(("kw", "row", "words"), [
    ({"lock_checked": False}, "lock", "did not check the locked files where the job ran"),
    ({"tokens": None, "witness": None, "witnessed": False}, "tokens_per_step", "reports no tokens per step"),
    ({"loss": ()}, "loss_band", "printed no loss"),
    ({"loss": ()}, "final_loss", "printed no loss"),
])
def test_no_row_reads_ok_for_a_comparison_that_was_not_made(kw: dict, row: str, words: str) -> None:
    b, c = arms(*FAST, **kw)
    v = judge(b, c, reference=REF)
    checks = [i for i in v.invariants if i.name == row]
    assert checks and all(i.status is CheckStatus.NOT_CHECKED and not i.ok for i in checks)
    assert words in checks[0].detail
    assert v.kind is VerdictKind.UNVERIFIED


def test_without_a_witnessed_reference_the_witnessed_rows_say_so() -> None:
    b, c = arms(*FAST)
    v = judge(b, c, reference=Reference(work=None, band=BAND, missing="the doctor ran on an old bot"))
    work = next(i for i in v.invariants if i.name == "work")
    assert work.status is CheckStatus.NOT_CHECKED and "the doctor ran on an old bot" in work.detail
    assert v.kind is VerdictKind.UNVERIFIED


def test_the_tokens_a_step_consumed_are_held_to_the_baselines_when_the_witness_saw_them() -> None:
    from tests.support.witnessed import report

    b, c = arms(*FAST, witness=report(tokens_in=64), tokens=None)
    v = judge(b, c, reference=REF)
    assert v.kind is VerdictKind.INVALID and v.reason.startswith("tokens_per_step:")
    assert "64 tokens consumed" in v.reason and "the baseline's 128" in v.reason
