"""A trial disturbed from outside (steal, CPU pressure, starved of CPU) is told from the host counters."""

from __future__ import annotations

from infrarsi.disturbance import disturbance
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord


def _run(n: int, *, wall: float = 10.0, outcome: Outcome = Outcome.OK, **host: float) -> TrialRecord:
    return TrialRecord(run_id="r", trial_no=n, candidate=Candidate.of({}), outcome=outcome,
                       metrics=TrialMetrics(step_time_s=0.1, wall_s=wall, host=tuple(host.items())))


REFS = [_run(1, psi_some_s=1.0, cpu_s=20.0), _run(2, psi_some_s=1.0, cpu_s=20.0)]


def test_an_undisturbed_run_and_one_with_nothing_measured_are_not_disturbed() -> None:
    assert disturbance(_run(3, psi_some_s=1.5, cpu_s=19.0, steal_s=0.1, cpus=4), REFS) is None
    assert disturbance(_run(3), REFS) is None
    assert disturbance(_run(3, wall=0.0, steal_s=100.0), REFS) is None
    assert disturbance(_run(3, outcome=Outcome.CRASH, steal_s=100.0), REFS) is None


def test_steal_per_cpu() -> None:
    assert disturbance(_run(3, steal_s=4.0, cpus=4), REFS) == \
        "trial 3: the hypervisor took 10% of each CPU during the trial (steal time)"
    assert disturbance(_run(3, steal_s=1.6, cpus=4), REFS) is None  # 4% of each CPU


def test_cpu_pressure_above_the_reference_runs_or_on_its_own() -> None:
    assert disturbance(_run(3, psi_some_s=4.0), REFS) == (
        "trial 3: runnable tasks waited for a CPU 40% of the trial (/proc/pressure/cpu), against 10% in "
        "undisturbed runs")
    assert disturbance(_run(3, psi_some_s=3.0), REFS) is None  # 20 points above
    assert disturbance(_run(3, psi_some_s=5.0), []) is None
    assert disturbance(_run(3, psi_some_s=7.0), []) == (
        "trial 3: runnable tasks waited for a CPU 70% of the trial (/proc/pressure/cpu), with no run to compare")


def test_starved_only_against_the_same_arm() -> None:
    starved = _run(3, cpu_s=10.0)
    assert disturbance(starved, REFS) == ("trial 3: its processes got 1.00 CPU-seconds per second, against "
                                          "2.00 in undisturbed runs of the same arm")
    assert disturbance(starved, REFS, same_arm=False) is None
    assert disturbance(_run(3, cpu_s=13.0), REFS) is None
    failed_refs = [_run(1, cpu_s=20.0, outcome=Outcome.CRASH)]
    assert disturbance(starved, failed_refs) is None  # only OK runs are a reference
