"""The time-to-verdict table: wall time as a multiple of one baseline trial, beside the previous policy's."""

from __future__ import annotations

from benchmarks.time_to_verdict import Measured, render

HERE = {"cpu": "AMD EPYC", "cores": "2", "note": ""}


def test_the_table_names_the_ratio_the_verdict_and_the_previous_policy() -> None:
    now = Measured(trials=14, wall_s=91.0, one_trial_s=6.5, verdict="promoted", speedup=1.48)
    before = Measured(trials=38, wall_s=446.0, one_trial_s=6.5, verdict="promoted", speedup=1.47)
    text = render([("chargpt", now, before)], "python -m benchmarks.time_to_verdict", HERE, "4076a20")
    assert "| chargpt | 14 | 91 s | 6.5 s | **14x** | promoted 1.48x | 38 | 446 s | 6.5 s | **69x** |" in text
    assert "Median wall / one trial: **14x** (previous: 69x)." in text and "AMD EPYC" in text


def test_a_failed_run_says_why_and_counts_nothing() -> None:
    failed = Measured(trials=3, wall_s=12.0, one_trial_s=None, verdict="-", speedup=None, error="run exited 1: boom")
    text = render([("x", failed, None)], "cmd", HERE, "rev")
    assert "run exited 1: boom" in text and "Median" not in text
