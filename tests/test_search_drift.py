"""The search compares like with like on a drifting machine: baseline controls, and trials read against them
(infrarsi/search/drift.py, bot/stages/run/search.py)."""

from __future__ import annotations

import math

import pytest

from bot.stages.run.search import _worth_measuring_again, top_candidates
from infrarsi.search.drift import ControlSchedule, Drift
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

BASE = Candidate.of({"variant": "a"})
TRUE = {"a": 1.0, "b": 0.85, "c": 0.7, "d": 0.92}  # step times at the doctor's machine speed


def record(no: int, variant: str, machine: float) -> TrialRecord:
    step = TRUE[variant] * machine
    return TrialRecord(run_id="r", trial_no=no, candidate=Candidate.of({"variant": variant}), outcome=Outcome.OK,
                       metrics=TrialMetrics(step_time_s=step, step_times_s=(step,) * 4, wall_s=5 * step))


def test_the_drift_is_interpolated_between_controls_in_trial_order() -> None:
    doctor = [record(n, "a", 1.0) for n in (1, 2)]
    controls = [record(6, "a", 1.0), record(10, "a", 1.3)]
    drift = Drift.measure(1.0, doctor, controls)
    assert drift.trials == (None, 6, 10)
    assert drift.offset_at(4) == pytest.approx(0.0)
    assert drift.offset_at(8) == pytest.approx(math.log(1.3) / 2)
    assert drift.offset_at(12) == pytest.approx(math.log(1.3))  # after the last control: its speed
    slow = record(11, "c", 1.3)
    assert drift.adjusted(slow).metrics.step_time_s == pytest.approx(0.7)
    assert "the baseline control of trial 10" in drift.describe(slow) and "x1.30" in drift.describe(slow)


def test_with_controls_the_truly_fastest_ranks_first_when_the_machine_slows_by_30_percent_halfway() -> None:
    # doctor (trials 1-2) at full speed; b and d in the first half; the machine then runs 30% slower, and the
    # truly fastest, c, runs in the slow half with a; controls after every few trials, the last at the end
    doctor = [record(n, "a", 1.0) for n in (1, 2)]
    trials = [record(3, "b", 1.0), record(4, "d", 1.0), record(7, "c", 1.3), record(8, "a", 1.3)]
    controls = [record(5, "a", 1.0), record(6, "a", 1.3), record(9, "a", 1.3)]
    raw = top_candidates(trials, 4, BASE)
    assert raw[0][0] == Candidate.of({"variant": "b"})  # the doctor's figure: drift ranked as speed
    drift = Drift.measure(1.0, doctor, controls)
    ranked = top_candidates([drift.adjusted(r) for r in trials], 4, BASE)
    assert [c.knob_dict()["variant"] for c, _ in ranked] == ["c", "b", "d"]
    assert ranked[0][1] == pytest.approx(0.7)


def test_a_trial_between_controls_that_disagree_is_measured_again_when_it_could_rank_among_the_best() -> None:
    doctor = [record(n, "a", 1.0) for n in (1, 2)]
    # the machine stepped somewhere between the controls of trials 3 and 7: c (trial 5) and d (trial 6) ran
    # at an unknown speed; b ran before the first control
    search = [record(2, "b", 1.0), record(5, "c", 1.3), record(6, "d", 1.3)]
    drift = Drift.measure(1.0, doctor, [record(3, "a", 1.0), record(7, "a", 1.3)])
    unsettled = drift.unsettled(0.02)
    assert unsettled is not None and unsettled[:2] == (3.0, 7.0)
    again = _worth_measuring_again(search, drift, unsettled, top_k=1)
    assert [r.trial_no for r in again] == [5]  # c could be the best; d could not beat b even at its best case
    assert Drift.measure(1.0, doctor, [record(3, "a", 1.0), record(7, "a", 1.01)]).unsettled(0.02) is None


def test_controls_come_more_often_when_the_machine_moves_and_less_when_it_holds_still() -> None:
    schedule = ControlSchedule(sigma_log=0.02)
    for _ in range(3):
        assert not schedule.due()
        schedule.trial_done()
    assert schedule.due()
    doctor = [record(1, "a", 1.0)]
    schedule.control_done(Drift.measure(1.0, doctor, [record(5, "a", 1.01)]))
    assert schedule.interval == 4 and schedule.since == 0
    schedule.control_done(Drift.measure(1.0, doctor, [record(5, "a", 1.01), record(9, "a", 1.3)]))
    assert schedule.interval == 2
