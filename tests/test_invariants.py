"""The pure side of the witness: authenticating its report, the work invariants, the calibrated loss band."""

from __future__ import annotations

import hmac
import json
from dataclasses import replace

import pytest

from infrarsi.invariants import (FLOP_TOLERANCE, DtypeDeviation, WorkReference, tolerance, vector_deviation,
                                 work_invariants)
from infrarsi.loss_band import LOSS_FLOOR, calibrate_band, first_step_outside
from infrarsi.witness import WitnessReport, authenticate

KEY = b"k" * 32
SHA = "ab" * 32


def _report(**changes) -> WitnessReport:
    base = WitnessReport(optimizer_steps=8, count_step=2, flops=1_000_000_000,
                         flops_by_op=(("aten.addmm", 400_000_000), ("aten.mm", 600_000_000)),
                         matmul_dtypes=("float32",), counted_s=0.1, params=3, param_elements=300,
                         grad_norms=(1.0, 0.5, 0.01), weight_norms=(10.0, 5.0, 1.0),
                         update_proj=(0.2, -0.1, 0.05), tampered=(), source_sha256=SHA)
    return replace(base, **changes)


def _line(report: WitnessReport | dict, key: bytes = KEY) -> str:
    text = json.dumps(report.to_dict() if isinstance(report, WitnessReport) else report)
    return json.dumps({"witness": text, "mac": hmac.new(key, text.encode(), "sha256").hexdigest()})


REFERENCE = WorkReference(reports=(_report(), _report()), first_loss=(4.8, 4.8),
                          allowed_dtypes=("bfloat16", "float32"))


def _broken(report: WitnessReport, *, first_loss: float = 4.8, reference: WorkReference = REFERENCE) -> dict:
    return {c.name: c.detail for c in work_invariants(report, first_loss=first_loss, steps_seen=8,
                                                      reference=reference, trial=7) if c.broken}


def test_an_authentic_report_round_trips() -> None:
    result = authenticate([_line(_report())], key=KEY, expected_sha256=SHA)
    assert result.error is None and result.report == _report()


@pytest.mark.parametrize("lines, error", [
    ([], "wrote no report"),
    (["not json"], "not a witness report"),
    ([_line(_report(), key=b"x" * 32)], "failed authentication"),
    ([_line(_report()), _line(_report(flops=1), key=b"guess")], "failed authentication"),
    ([_line(_report(source_sha256="cd" * 32))], "source hash differs"),
    ([_line(_report(tampered=("time.perf_counter was replaced",)))], "tampered with: time.perf_counter"),
])
def test_a_missing_forged_foreign_or_tampered_report_is_not_trusted(lines: list[str], error: str) -> None:
    result = authenticate(lines, key=KEY, expected_sha256=SHA)
    assert result.error is not None and error in result.error


def test_the_same_work_passes_every_invariant() -> None:
    assert _broken(_report()) == {}


def test_less_counted_work_is_invalid_and_the_difference_is_named() -> None:
    broken = _broken(_report(flops=600_000_000, flops_by_op=(("aten.addmm", 400_000_000), ("aten.mm", 200_000_000))))
    assert set(broken) == {"work"}
    assert "-40.0%" in broken["work"] and "aten.mm 0.2 GFLOP vs 0.6 GFLOP" in broken["work"]
    assert "less work than the baseline beyond 1%" in broken["work"]


def test_more_work_and_a_shortfall_inside_the_tolerance_pass() -> None:
    assert _broken(_report(flops=1_300_000_000)) == {}  # recomputation (checkpointing) adds work
    assert _broken(_report(flops=int(1e9 * (1 - FLOP_TOLERANCE / 2)))) == {}


def test_a_frozen_or_detached_parameter_breaks_the_trainable_set() -> None:
    assert "trainable" in _broken(_report(grad_norms=(1.0, None, 0.01)))
    assert "trainable" in _broken(_report(params=2, param_elements=200, grad_norms=(1.0, 0.5)))


def test_an_optimizer_step_skipped_shows_in_the_step_count() -> None:
    assert "optimizer_steps" in _broken(_report(optimizer_steps=4))


def test_a_dtype_the_contract_does_not_allow_is_invalid() -> None:
    broken = _broken(_report(matmul_dtypes=("float16",)))
    assert "precision" in broken and "allows only bfloat16, float32" in broken["precision"]


def test_numerics_off_in_fp32_break_the_first_step_and_the_weights() -> None:
    assert "first_step" in _broken(_report(), first_loss=4.81)
    assert "first_step" in _broken(_report(grad_norms=(1.0, 0.52, 0.01)))
    assert "weights" in _broken(_report(update_proj=(0.4, -0.2, 0.1)))  # twice the learning rate


def test_a_lower_dtype_is_held_to_what_the_doctor_measured_it_to_move() -> None:
    moved = _report(matmul_dtypes=("bfloat16",), grad_norms=(1.0, 0.503, 0.01), update_proj=(0.21, -0.1, 0.05))
    assert "first_step" in _broken(replace(moved, matmul_dtypes=("float32",)))  # fp32: far too much
    assert _broken(replace(moved, update_proj=(0.201, -0.1, 0.05))) == {}  # bf16: assert_close's 1.6e-2
    assert "weights" in _broken(replace(moved, update_proj=(0.3, -0.1, 0.05)))  # 44%: beyond any floor
    measured = replace(REFERENCE, deviations=(DtypeDeviation(dtype="bfloat16", first_loss=1e-5, grad=2e-3,
                                                             update=0.02),))
    assert tolerance(measured, "bfloat16", "update") == pytest.approx(0.06)
    assert _broken(moved, reference=measured) == {}
    assert "weights" in _broken(replace(moved, update_proj=(0.4, -0.2, 0.1)), reference=measured)


def test_the_update_fingerprint_is_a_whole_vector_deviation() -> None:
    assert vector_deviation([2.0, 0.0], [[1.0, 0.0], [1.0, 0.0]]) == pytest.approx(1.0)
    assert vector_deviation([1.0, 1e-9], [[1.0, -1e-9]]) < 1e-8  # sign noise on a still parameter is nothing


def test_the_calibrated_band_is_measured_and_capped_by_the_contract() -> None:
    runs = [[5.0, 4.0, 3.0], [5.0, 4.0, 3.0]]
    deterministic = calibrate_band(runs, rtol=0.005, final_rtol=0.005)
    assert deterministic.method == "calibrated"
    assert deterministic.upper[0] - 5.0 == pytest.approx(LOSS_FLOOR * 5.0)
    assert first_step_outside(deterministic, [5.0, 4.0, 3.0 * (1 + 2e-3)]) == 3  # 2% band would have passed it
    widened = calibrate_band(runs, rtol=0.005, final_rtol=0.005, dtype_deviation=[1e-3, 1e-3, 1e-3])
    assert widened.upper[1] - 4.0 == pytest.approx(3e-3 * 4.0) and widened.final_rtol == pytest.approx(3e-3)
    capped = calibrate_band(runs, rtol=0.005, final_rtol=0.004, dtype_deviation=[0.01, 0.01, 0.01])
    assert capped.upper[0] - 5.0 == pytest.approx(0.005 * 5.0) and capped.final_rtol == 0.004
    noisy = calibrate_band([[5.0, 4.0], [5.002, 4.002]], rtol=0.005, final_rtol=0.005)
    assert noisy.upper[0] - noisy.mean[0] == pytest.approx(4 * 0.002 / 2 ** 0.5, rel=1e-6)


def test_reports_and_references_round_trip() -> None:
    assert WitnessReport.from_dict(_report().to_dict()) == _report()
    ref = replace(REFERENCE, deviations=(DtypeDeviation(dtype="bfloat16", first_loss=1e-5, grad=2e-3, update=0.02,
                                                        loss=(1e-5,)),))
    assert WorkReference.from_dict(json.loads(json.dumps(ref.to_dict()))) == ref


def _step_count(report: WitnessReport, *, seen: int, at_report: int | None) -> bool:
    checks = work_invariants(report, first_loss=4.8, steps_seen=seen, steps_at_report=at_report,
                             reference=REFERENCE, trial=7)
    return next(c.ok for c in checks if c.name == "optimizer_steps")


@pytest.mark.parametrize("optimizer_steps, at_report, ok", [
    (131, 14, True),  # minGPT prints at iter 0, 10, ...: line 14 comes after optimizer step 131
    (131, 13, True),  # the HF Trainer prints at step 10, 20, ...: 13 lines by step 131
    (65, 13, False),  # a step skipped every other time: half the lines' worth
    (131, 7, True),  # lines the bot read after the report (a busy reader) were printed before it
])
def test_a_line_every_k_steps_is_held_to_k_optimizer_steps_per_line(optimizer_steps: int, at_report: int,
                                                                     ok: bool) -> None:
    # Seen on karpathy/minGPT's chargpt: each line stands for 10 steps, and every honest candidate was
    # `invalid: 14 optimizer steps for 2 reported steps` before the witness and the count knew it.
    baseline = _report(at="step", t=1.0, optimizer_steps=131)
    reference = replace(REFERENCE, reports=(baseline, baseline))
    checks = work_invariants(replace(baseline, optimizer_steps=optimizer_steps), first_loss=4.8, steps_seen=16,
                             steps_at_report=at_report, reference=reference, trial=7, steps_per_line=10)
    assert next(c.ok for c in checks if c.name == "optimizer_steps") is ok


def test_a_run_past_the_window_is_held_to_its_own_lines_not_to_the_doctors_step_count() -> None:
    # verification's first pair runs 12 lines past the doctor's 8: its report comes at step 20 (seen on issue 47's
    # widepkg fixture: every candidate was invalid on "20 optimizer steps for 20 reported steps (baseline 8)")
    baseline = _report(at="step", t=1.0)
    reference = replace(REFERENCE, reports=(baseline, baseline))

    def ok(steps: int) -> bool:
        checks = work_invariants(replace(baseline, optimizer_steps=steps), first_loss=4.8, steps_seen=22,
                                 steps_at_report=20, reference=reference, trial=7)
        return next(c.ok for c in checks if c.name == "optimizer_steps")

    assert ok(20) and not ok(10)
    # its weights are those of step 20: held to the pair's baseline of the same length (past_window), not here
    longer = work_invariants(replace(baseline, optimizer_steps=20, update_proj=(9.0, 9.0, 9.0)), first_loss=4.8,
                             steps_seen=22, steps_at_report=20, reference=reference, trial=7)
    assert "weights" not in {c.name for c in longer} and not any(c.broken for c in longer)


@pytest.mark.parametrize("report, seen, at_report, ok", [
    (_report(), 8, None, True),  # at exit: every line a step
    (_report(optimizer_steps=4), 8, None, False),  # a step every other line, at exit
    # The bot stopped the job: the report came at the end of step 8, whose line followed it; more lines
    # arrived during the linger before SIGTERM.
    (_report(at="step", t=1.0), 70, 7, True),
    (_report(at="step", t=1.0), 70, 8, True),
    (_report(at="step", t=1.0), 70, 15, False),  # step 8 came at line 16: a step every other line
    # A busy reader stamped lines 7 and 8 after the report (seen in CI): printed before it, only read late.
    (_report(at="step", t=1.0), 8, 6, True),
    (_report(at="step", t=1.0, optimizer_steps=10), 8, 6, False),  # more steps than every line that arrived
    (_report(at="sigterm", t=1.0, optimizer_steps=41), 45, 41, True),  # the count depends on the signal
    (_report(at="sigterm", t=1.0, optimizer_steps=20), 45, 41, False),
])
def test_a_report_written_before_exit_is_held_to_the_lines_seen_when_it_was_written(
        report: WitnessReport, seen: int, at_report: int | None, ok: bool) -> None:
    assert _step_count(report, seen=seen, at_report=at_report) is ok
