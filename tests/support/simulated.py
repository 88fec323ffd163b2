"""A machine in numbers for the production verification (bot/stages/run/verify.py ``verify_candidate``).

:class:`SimulatedMachine` stands where a :class:`~bot.stages.run.candidate.TrialContext` stands: each run of
an arm is a finished, witnessed trial record whose median step time is drawn log-normally around the arm's
true time, with the host counters a launcher records. A *burst* — something outside the trial taking the CPU —
makes two consecutive runs of one arm 3-5x slower; the host then shows it as CPU pressure (as
``/proc/pressure/cpu`` does), unless ``visible`` is off (a bot that did not look). Used by the tests of the
sequential verification and by ``benchmarks/verify_sim.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from infrarsi.loss_band import calibrate
from infrarsi.trial_record import Candidate, TrialRecord
from tests.support.witnessed import trial, work_reference

LOSS = (5.0, 4.8, 4.6, 4.5, 4.4, 4.3)
BASELINE = Candidate.of({"dtype": "fp32"})
CANDIDATE = Candidate.of({"dtype": "bf16"})


@dataclass
class Burst:
    arm: str  # "baseline" or "candidate"
    at: int  # the arm's run (0-based) where it starts; it lasts two runs
    factor: float


@dataclass
class Contention:
    """Sustained load from the ``at``-th run (0-based, both arms counted) to the end: every run is ``factor``
    times slower, the faster arm (the candidate's, when it is faster) ``skew`` times more so (its shorter steps
    lose more to each preemption), and the host shows it between runs as busy CPUs."""

    at: int
    factor: float
    skew: float = 1.5


@dataclass
class SimulatedMachine:
    speedup: float  # the candidate's true speedup
    sigma: float  # log-sd of a run's median step time
    seed: int = 0
    burst: Burst | None = None
    visible: bool = True  # the host shows the burst (PSI); off: it is counted as if nothing happened
    contention: Contention | None = None
    step_s: float = 0.5
    max_pairs: int = 12
    doctor_sigma: float | None = None  # what the doctor measured (default: the true sigma)
    order: list[str] = field(default_factory=list)
    runs: dict[str, int] = field(default_factory=lambda: {"baseline": 0, "candidate": 0})

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        # Common random numbers: the j-th counted run of an arm draws the same noise with or without a burst, so
        # a verdict that differs between the two was flipped by the burst, not by other noise. A run the burst
        # disturbed draws its own (it is re-run when the bot sees the burst, counted when it does not).
        self.noise = {"baseline": rng.normal(size=256), "candidate": rng.normal(size=256)}
        self.burst_noise = rng.normal(size=8)
        self.bursts_seen = 0
        self.contract = SimpleNamespace(defaults=lambda: BASELINE.knob_dict(), knobs=(), constraints=(),
                                        verify=SimpleNamespace(min_effect=0.01, alpha=0.05, max_speedup=10.0,
                                                               waive=(), max_pairs=self.max_pairs,
                                                               quiet_wait_s=300.0),
                                        timing=SimpleNamespace(warmup_steps=2, measured_steps=6, steps_per_line=1))
        self.repo = Path(".")
        self.journal = SimpleNamespace(trials=lambda run_id: [])
        self.executor = SimpleNamespace(name="local", host_busy=self.busy_share)  # what verification asks of it

    def doctor(self) -> SimpleNamespace:
        """What verification reads of the doctor: noise, pairs, the witnessed reference and the band."""
        from infrarsi.stats import repeats_for_effect

        sigma = self.doctor_sigma if self.doctor_sigma is not None else self.sigma
        pairs = repeats_for_effect(sigma, 0.05, 0.05, 0.8, min_effect=0.01, n_max=self.max_pairs)
        return SimpleNamespace(verify_pairs=pairs, sigma_log=sigma, peak_flops={}, model_flops_per_step=None,
                               work=work_reference(), loss_band=calibrate([LOSS, LOSS], rtol=0.02, final_rtol=0.01),
                               notes=(), fingerprint={}, trials=())

    def contended(self) -> bool:
        c = self.contention
        return c is not None and len(self.order) >= c.at

    def busy_share(self) -> float:
        """What the host shows between runs: the sustained load's busy CPUs, or a quiet machine."""
        return 0.95 if self.contended() else 0.05

    def quiet(self, budget_s: float = 300.0):  # noqa: ANN201 - a QuietWait on this machine's clock (no sleeping)
        from infrarsi.quiet import QuietWait

        return QuietWait(budget_s=budget_s, busy=self.busy_share, sleep=lambda _s: None)

    def run(self, run_id: str, candidate: Candidate, *, witness: bool = False, past_window: int = 0) -> TrialRecord:
        arm = "baseline" if candidate == BASELINE else "candidate"
        k = self.runs[arm]
        loaded = self.contended()
        self.runs[arm] += 1
        self.order.append(arm)
        true = self.step_s / (self.speedup if arm == "candidate" else 1.0)
        psi = 0.05
        if loaded and self.contention is not None:
            c = self.contention
            faster = (arm == "candidate") == (self.speedup >= 1.0)
            true *= c.factor * (c.skew if faster else 1.0)
            psi = 0.6 if self.visible else 0.05
        b = self.burst
        if b is not None and b.arm == arm and b.at <= k < b.at + 2:
            z = self.noise[arm][k] if not self.visible else self.burst_noise[self.bursts_seen]
            self.bursts_seen += 1
            step = true * b.factor * math.exp(self.sigma * z)
            psi = 0.75 if self.visible else 0.05
        else:
            skipped = self.bursts_seen if self.visible and b is not None and b.arm == arm else 0
            step = true * math.exp(self.sigma * self.noise[arm][k - skipped])
        wall = 6 * step + 2.0
        record = trial(len(self.order), step, cand=candidate, loss=LOSS)
        host = (("cpus", 2.0), ("cpu_s", 1.8 * wall), ("psi_some_s", psi * wall))
        return replace(record, metrics=replace(record.metrics, wall_s=wall, host=host))
