"""Step lines that reach the bot several to one read (millisecond steps) are timed by an even share.

Seen on a 16-core Xeon: hydrajob's 2.7 ms steps arrived two lines to a read, one
interval was 0.0 and the doctor's statistics refused the run. The share keeps
the window's total exact, so the mean step time is unchanged.
"""

from __future__ import annotations

import statistics

import pytest

from infrarsi.measure import classify, summarize
from infrarsi.seams.executor import Execution
from infrarsi.trial_record import Outcome, StepEvent


def _execution(stamps: list[float]) -> Execution:
    events = tuple(StepEvent(step=i + 1, stamp=t, loss=4.0 - 0.01 * i) for i, t in enumerate(stamps))
    return Execution(events=events, returncode=0, wall_s=stamps[-1] + 1, peak_rss_bytes=1 << 20)


def test_lines_arriving_two_to_a_read_share_the_gap_they_arrived_after() -> None:
    # steps every 3 ms; steps 5 and 6 reach the bot together, as do steps 9, 10 and 11
    stamps = [0.003 * i for i in range(12)]
    stamps[4] = stamps[5]
    stamps[8] = stamps[9] = stamps[10]
    m = summarize(_execution(stamps), warmup=2, measured=9)
    assert len(m.step_times_s) == 9 and min(m.step_times_s) > 0.0029
    assert sum(m.step_times_s) == pytest.approx(stamps[10] - stamps[1])
    assert m.step_time_s == pytest.approx(0.003)
    assert classify(_execution(stamps), m, warmup=2, measured=9, tokens_per_step=0)[0] is Outcome.OK


def test_the_first_measured_lines_arriving_with_the_last_warmup_line_share_the_next_gap() -> None:
    stamps = [0.0, 0.01, 0.01, 0.01, 0.04, 0.05, 0.06]
    m = summarize(_execution(stamps), warmup=2, measured=5)
    assert m.step_times_s == pytest.approx([0.01] * 5)


def test_uneven_steps_are_left_as_they_came() -> None:
    stamps = [0.0, 0.01, 0.02, 0.05, 0.06, 0.07, 0.075]
    m = summarize(_execution(stamps), warmup=1, measured=6)
    assert m.step_times_s == pytest.approx([0.01, 0.01, 0.03, 0.01, 0.01, 0.005])
    assert statistics.median(m.step_times_s) == pytest.approx(0.01)


def test_lines_that_all_arrive_at_once_give_the_doctor_a_clear_error_not_a_traceback() -> None:
    from infrarsi.doctor import DoctorError, good_baseline_runs
    from infrarsi.trial_record import Candidate, TrialRecord

    stamps = [5.0] * 8
    m = summarize(_execution(stamps), warmup=2, measured=6)
    assert classify(_execution(stamps), m, warmup=2, measured=6, tokens_per_step=0)[0] is Outcome.OK
    records = [TrialRecord(run_id="r", trial_no=i, candidate=Candidate.of({}, ()), outcome=Outcome.OK, metrics=m)
               for i in (1, 2)]
    with pytest.raises(DoctorError, match="arrived all at once"):
        good_baseline_runs(records)
