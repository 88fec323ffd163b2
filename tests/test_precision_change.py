"""The pull request states a precision change: another numeric result, allowed by the contract, held to the doctor's
measured tolerances."""

from __future__ import annotations

from tests.support.reports import mfu_record, sample_report
from infrarsi.report.precision_change import precision_change
from infrarsi.report.render import render_pr_body


def test_a_bf16_winner_of_an_fp32_baseline_is_named_with_the_policy_and_the_measured_tolerances() -> None:
    winner = [mfu_record(7, 0.05, dtypes=("bfloat16", "float32"))]
    text = precision_change(baseline=("float32",), winner=winner, policy=("float32", "bfloat16"),
                            measured=("bfloat16",))
    assert text is not None
    assert "bfloat16 instead of the baseline's float32" in text
    assert "[precision] allow" in text and "doctor measured" in text


def test_a_knob_offered_dtype_without_a_calibration_run_says_so() -> None:
    text = precision_change(baseline=("float32",), winner=[mfu_record(7, 0.05, dtypes=("bfloat16",))], policy=(),
                            measured=())
    assert text is not None and "a dtype knob" in text and "assert_close" in text


def test_the_same_precision_says_nothing() -> None:
    assert precision_change(baseline=("float32",), winner=[mfu_record(7, 0.05)], policy=("float32",),
                            measured=()) is None
    assert precision_change(baseline=("bfloat16",), winner=[mfu_record(7, 0.05, dtypes=("float32",))],
                            policy=(), measured=()) is None


def test_the_pull_request_body_carries_it_under_changes() -> None:
    body = render_pr_body(sample_report(precision_change="**Precision change:** bf16 now"))
    changes = body.split("## Changes", 1)[1]
    assert changes.lstrip().startswith("**Precision change:** bf16 now")
