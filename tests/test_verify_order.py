"""The order verification runs its arms in: counterbalanced, so a drifting machine favours neither arm."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from bot.stages.run.verify import verify_candidate
from infrarsi.contract.model import WAIVABLE
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord
from infrarsi.verdict import VerdictKind

BASE = Candidate.of({"dtype": "fp32"})
CAND = Candidate.of({"dtype": "bf16"})
LOSS = (5.0, 4.8, 4.6)


@dataclass
class DriftingContext:
    """Runs nothing: each run is ``drift`` faster than the one before, whatever it is."""

    drift: float = 0.0
    start: float = 1.0
    order: list[str] = field(default_factory=list)
    # Nothing is witnessed here (the order is the point): the contract waives every row only a witness makes.
    contract = SimpleNamespace(defaults=lambda: {"dtype": "fp32"}, knobs=(), constraints=(),
                               verify=SimpleNamespace(min_effect=0.01, alpha=0.05, max_speedup=10.0, waive=WAIVABLE,
                                                      max_pairs=12, quiet_wait_s=0.0),
                               timing=SimpleNamespace(warmup_steps=2, measured_steps=6, steps_per_line=1))
    repo = Path(".")
    journal = SimpleNamespace(trials=lambda run_id: [])  # no doctor's runs on record: nothing to compare load with
    executor = SimpleNamespace(name="local", host_busy=lambda: None)  # a host it cannot see: never waits on it

    def run(self, run_id: str, candidate: Candidate, *, witness: bool = False, past_window: int = 0) -> TrialRecord:
        step = self.start * (1.0 - self.drift) ** len(self.order)
        self.order.append("A" if candidate == BASE else "B")
        times = (step,) * 4
        return TrialRecord(run_id=run_id, trial_no=len(self.order), candidate=candidate, outcome=Outcome.OK,
                           metrics=TrialMetrics(step_time_s=step, step_time_cv=0.0, step_times_s=times,
                                                tokens_per_step=128, loss=LOSS, wall_s=sum(times) + 1.0))


DOCTOR = SimpleNamespace(verify_pairs=6, sigma_log=0.02, loss_band=None, peak_flops={}, model_flops_per_step=None,
                         work=None, notes=(), fingerprint={})


def test_pairs_alternate_which_arm_runs_first() -> None:
    ctx = DriftingContext()
    verify_candidate(ctx, run_id="r", candidate=CAND, doctor=DOCTOR, pairs=6)  # type: ignore[arg-type]
    assert "".join(ctx.order) == "AB" "BA" "AB" "BA" "AB" "BA"


def test_a_machine_that_speeds_up_run_by_run_reports_no_speedup_for_the_baseline_against_itself() -> None:
    # With A B A B every B would run one slot later than its A: 2% per run would read as a 1.02x speedup.
    same = Candidate.of({"dtype": "fp32"}, [])
    ctx = DriftingContext(drift=0.02)
    verdict = verify_candidate(ctx, run_id="r", candidate=same, doctor=DOCTOR, pairs=6)  # type: ignore[arg-type]
    assert verdict.kind is VerdictKind.NOT_SIGNIFICANT, verdict.reason
    assert verdict.speedup is not None and abs(verdict.speedup - 1.0) < 0.002, verdict.speedup
    assert verdict.pairs == 6 and verdict.stop == "fixed"


@dataclass
class TwoSpeedContext(DriftingContext):
    """The candidate's runs take ``ratio`` of the baseline's time, with a little run-to-run jitter."""

    ratio: float = 0.5

    def run(self, run_id: str, candidate: Candidate, witness: bool = False, past_window: int = 0) -> TrialRecord:
        record = super().run(run_id, candidate, witness=witness)
        jitter = 1.0 + 0.01 * ((len(self.order) * 7) % 5 - 2)  # -2% .. +2%, deterministic
        step = (self.ratio if candidate != BASE else 1.0) * jitter
        return TrialRecord(run_id=run_id, trial_no=record.trial_no, candidate=candidate, outcome=Outcome.OK,
                           metrics=TrialMetrics(step_time_s=step, step_time_cv=0.0, step_times_s=(step,) * 4,
                                                tokens_per_step=128, loss=LOSS, wall_s=4 * step + 1.0))


def test_without_a_pair_count_a_clear_speedup_stops_for_efficacy_at_the_first_look() -> None:
    ctx = TwoSpeedContext(ratio=0.5)
    verdict = verify_candidate(ctx, run_id="r", candidate=CAND, doctor=DOCTOR)  # type: ignore[arg-type]
    assert verdict.kind is VerdictKind.PROMOTED, verdict.reason
    assert (verdict.pairs, verdict.stop) == (4, "efficacy") and len(ctx.order) == 8


def test_without_a_pair_count_no_speedup_stops_for_futility_at_the_first_look() -> None:
    ctx = TwoSpeedContext(ratio=1.0)
    verdict = verify_candidate(ctx, run_id="r", candidate=CAND, doctor=DOCTOR)  # type: ignore[arg-type]
    assert verdict.kind is VerdictKind.NOT_SIGNIFICANT and "futility" in verdict.reason, verdict.reason
    assert (verdict.pairs, verdict.stop) == (4, "futility")
