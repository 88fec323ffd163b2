"""Disturbed runs run again, a bounded wait for quiet, and "not now" when the machine will not sit still."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infrarsi.quiet import DisturbanceGuard, MachineBusy, QuietWait
from infrarsi.trial_record import Candidate
from tests.support.witnessed import trial

CAND = Candidate.of({"dtype": "bf16"})


def _run(no: int, psi: float):  # noqa: ANN202 - a finished trial whose host showed ``psi`` of CPU pressure
    record = trial(no, 0.5, cand=CAND, loss=(5.0,))
    wall = record.metrics.wall_s
    return replace(record, metrics=replace(record.metrics, host=(("cpus", 2.0), ("cpu_s", 1.8 * wall),
                                                                  ("psi_some_s", psi * wall))))


class Host:
    """A host whose busy share follows ``shares`` look by look (the last one repeats), on a clock of its own."""

    def __init__(self, *shares: float) -> None:
        self.shares = list(shares)
        self.slept = 0.0

    def busy(self) -> float:
        return self.shares.pop(0) if len(self.shares) > 1 else self.shares[0]

    def sleep(self, s: float) -> None:
        self.slept += s


def test_a_quiet_machine_is_not_waited_for() -> None:
    host = Host(0.05)
    wait = QuietWait(budget_s=60, busy=host.busy, sleep=host.sleep)
    wait.calibrate()
    assert wait.until_quiet() and host.slept == 0


def test_the_wait_backs_off_and_is_bounded() -> None:
    host = Host(0.05, 0.95)
    said: list[str] = []
    wait = QuietWait(budget_s=100, busy=host.busy, sleep=host.sleep, progress=said.append)
    wait.calibrate()
    assert not wait.until_quiet()
    assert host.slept == pytest.approx(100) and wait.waited_s == pytest.approx(100)
    assert "waiting 5 s" in said[0] and "waiting 10 s" in said[1] and "waiting 20 s" in said[2]


def test_quiet_again_goes_on() -> None:
    host = Host(0.05, 0.95, 0.95, 0.10)
    wait = QuietWait(budget_s=100, busy=host.busy, sleep=host.sleep)
    wait.calibrate()
    assert wait.until_quiet() and host.slept == pytest.approx(15)


def test_a_disturbed_run_is_run_again_then_a_busy_host_is_waited_for_then_given_up() -> None:
    runs = iter([_run(1, 0.05), _run(2, 0.7), _run(3, 0.7)])
    host = Host(0.05, 0.05, 0.05, 0.05, 0.95)  # calibration, then a look before each run: busy before the 4th
    guard = DisturbanceGuard(rerun_budget=2, wait=QuietWait(budget_s=30, busy=host.busy, sleep=host.sleep))
    guard.wait.calibrate()
    first = guard.run(lambda: next(runs), lambda: [])
    assert first.trial_no == 1
    with pytest.raises(MachineBusy, match="the machine stayed busy before a trial could run"):
        guard.run(lambda: next(runs), lambda: [first])
    assert guard.reruns == [2, 3] and guard.disturbed == [2, 3] and host.slept == pytest.approx(30)


def test_a_machine_quiet_between_runs_yet_disturbing_every_run_is_not_waited_on_forever() -> None:
    runs = (_run(n, 0.7) for n in range(2, 100))
    host = Host(0.05)
    guard = DisturbanceGuard(rerun_budget=2, wait=QuietWait(budget_s=30, busy=host.busy, sleep=host.sleep))
    guard.wait.calibrate()
    with pytest.raises(MachineBusy):
        guard.run(lambda: next(runs), lambda: [_run(1, 0.05)])
    assert len(guard.disturbed) == 5  # two re-runs, two after waiting, then no answer


def test_a_stage_that_starts_on_a_saturated_machine_waits_instead_of_comparing() -> None:
    host = Host(0.95)
    guard = DisturbanceGuard(rerun_budget=2, wait=QuietWait(budget_s=20, busy=host.busy, sleep=host.sleep))
    guard.wait.calibrate()
    with pytest.raises(MachineBusy, match="before a trial could run"):
        guard.run(lambda: _run(1, 0.05), lambda: [])
    assert host.slept == pytest.approx(20)
