"""A synthetic tuning problem with a known optimum, to benchmark the engine against random search.

A small mixed space shaped like a real single-GPU job: micro-batch (powers of
two dividing the global batch of 16), dtype (fp32/bf16/fp16), torch.compile,
and five patches (SDPA, fused cross-entropy, activation checkpointing, and two
conflicting optimizer rewrites). Its truths are *not* what the engine's model
can express exactly: peak memory is ``params + activations x micro-batch x
savings`` (not log-linear); time is best at a middle micro-batch (8), SDPA
only pays in half precision, compile has a synergy with bf16 and a penalty
with checkpointing; fp16 with compile crashes; micro-batch 8 and above OOM
unless memory savers are stacked, so "turn everything up" is not the answer.
Priors are the catalog's, plus knob priors that are roughly right in sign and
wrong in size. With the nominal effects 2 of the 720 points are within 5% of
the optimum; ``make_job(seed)`` jitters every effect for a different truth per
seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from infrarsi.contract.model import Constraint, Knob
from infrarsi.patches import Effect, PatchSpec
from infrarsi.search.engine import SearchEngine
from infrarsi.search.features import Priors
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

LIMIT: int = 8 * 2 ** 30
BASE_STEP_S: float = 0.5


def _patch(pid: str, t: float, ts: float, m: float, ms: float, conflicts: tuple[str, ...] = ()) -> PatchSpec:
    return PatchSpec(id=pid, title=pid, rationale="synthetic", targets=("model.py",), kind="codemod", codemod=pid,
                     effect=Effect(time_ratio=t, time_sigma=ts, mem_ratio=m, mem_sigma=ms, source="catalog"),
                     conflicts_with=conflicts)


def make_space() -> SearchSpace:
    knobs = [
        Knob(name="micro_batch", kind="int", default=1, values=(1, 2, 4, 8, 16, 32), flag="--micro-batch"),
        Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16", "fp16"), flag="--dtype"),
        Knob(name="compile", kind="bool", default=False, flag="--compile"),
    ]
    constraints = [Constraint(kind="divides", knob="micro_batch", value=16, reason="global batch 16")]
    patches = [
        _patch("sdpa", 0.85, 0.2, 0.85, 0.15),
        _patch("fused_ce", 0.93, 0.08, 0.8, 0.15),
        _patch("checkpoint", 1.25, 0.1, 0.65, 0.15),
        _patch("optimizer_foreach", 0.95, 0.05, 1.02, 0.03, ("optimizer_fused",)),
        _patch("optimizer_fused", 0.93, 0.06, 1.0, 0.03, ("optimizer_foreach",)),
    ]
    return SearchSpace.from_contract(knobs, constraints, patches)


def make_priors() -> Priors:
    return Priors(
        time={"micro_batch": (-0.1, 0.2), "dtype=bf16": (math.log(0.7), 0.3), "dtype=fp16": (math.log(0.7), 0.3),
              "compile=True": (math.log(0.8), 0.3)},
        memory={"micro_batch": (0.3, 0.3), "dtype=bf16": (math.log(0.8), 0.2), "dtype=fp16": (math.log(0.8), 0.2),
                "compile=True": (0.0, 0.2)},
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class SyntheticJob:
    """The ground truth of the synthetic problem."""

    space: SearchSpace
    priors: Priors
    effects: dict[str, float]
    limit: int = LIMIT
    time_noise: float = 0.02
    memory_noise: float = 0.01

    def log_time(self, c: Candidate) -> float:
        k, p = c.knob_dict(), set(c.patches)
        e = self.effects
        x = math.log2(int(k["micro_batch"]))
        half = k["dtype"] != "fp32"
        t = math.log(BASE_STEP_S) + e["mb"] * x + e["mb^2"] * x * x
        t += e[str(k["dtype"])] if half else 0.0
        if k["compile"]:
            t += e["compile"] + (e["compile*bf16"] if k["dtype"] == "bf16" else 0.0)
            t += e["compile*checkpoint"] if "checkpoint" in p else 0.0
        if "sdpa" in p:
            t += e["sdpa"] if half else e["sdpa/fp32"]
        t += sum(e[name] for name in ("fused_ce", "checkpoint", "optimizer_foreach", "optimizer_fused") if name in p)
        return t

    def peak_bytes(self, c: Candidate) -> float:
        k, p = c.knob_dict(), set(c.patches)
        act = 0.2 * int(k["micro_batch"]) * (1.0 if k["dtype"] == "fp32" else 0.6)
        for name, f in (("sdpa", 0.7), ("fused_ce", 0.75), ("checkpoint", 0.35)):
            act *= f if name in p else 1.0
        act *= 1.15 if k["compile"] else 1.0
        return (0.35 + act) * self.limit

    def crashes(self, c: Candidate) -> bool:
        k = c.knob_dict()
        return bool(k["compile"]) and k["dtype"] == "fp16"

    def feasible(self, c: Candidate) -> bool:
        return not self.crashes(c) and self.peak_bytes(c) < self.limit

    def optimum(self) -> tuple[Candidate, float]:
        every = self.space.enumerate()
        assert every is not None
        best = min((c for c in every if self.feasible(c)), key=self.log_time)
        return best, self.log_time(best)

    def run(self, c: Candidate, rng: np.random.Generator, trial_no: int) -> TrialRecord:
        """One simulated trial: noisy time and peak, OOM above the limit, crash in the crash region."""
        peak = self.peak_bytes(c) * math.exp(self.memory_noise * float(rng.standard_normal()))
        common = dict(run_id="synthetic", trial_no=trial_no, candidate=c, memory_limit_bytes=self.limit)
        if self.crashes(c):
            return TrialRecord(**common, outcome=Outcome.CRASH, reason="synthetic crash")
        if peak >= self.limit:
            return TrialRecord(**common, outcome=Outcome.OOM,
                               metrics=TrialMetrics(peak_mem_bytes=self.limit, peak_mem_censored=True))
        step = math.exp(self.log_time(c) + self.time_noise * float(rng.standard_normal()))
        return TrialRecord(**common, outcome=Outcome.OK,
                           metrics=TrialMetrics(step_time_s=step, peak_mem_bytes=int(peak)))


#: True log-time effects; ``mb`` and ``mb^2`` are per log2 of the micro-batch.
TRUE_EFFECTS: dict[str, float] = {
    "mb": -0.3, "mb^2": 0.05, "bf16": -0.4, "fp16": -0.3, "compile": -0.12, "compile*bf16": -0.08,
    "compile*checkpoint": 0.1, "sdpa": -0.10, "sdpa/fp32": 0.02, "fused_ce": -0.05, "checkpoint": 0.2,
    "optimizer_foreach": -0.03, "optimizer_fused": -0.06,
}


def make_job(seed: int | None = None, *, priors: Priors | None = None) -> SyntheticJob:
    """The job with :data:`TRUE_EFFECTS`, or with each effect scaled by U(0.6, 1.4) drawn from ``seed``
    (a different ground truth per seed, so a benchmark over seeds is not one problem repeated)."""
    effects = dict(TRUE_EFFECTS)
    if seed is not None:
        rng = np.random.default_rng([seed, 2024])
        effects = {k: v * float(rng.uniform(0.6, 1.4)) for k, v in effects.items()}
    return SyntheticJob(space=make_space(), priors=priors or make_priors(), effects=effects)


def best_found(job: SyntheticJob, records: list[TrialRecord]) -> float:
    """True log time of the best candidate that ran ok (inf if none did)."""
    return min((job.log_time(r.candidate) for r in records if r.outcome == Outcome.OK), default=math.inf)


def run_engine(job: SyntheticJob, seed: int, budget: int = 30, first: int = 8, q: int = 4,
               on_batch: Callable[[SearchEngine], None] | None = None) -> list[TrialRecord]:
    """The engine's loop on the synthetic job: a first batch, then batches of ``q`` up to ``budget`` trials."""
    engine = SearchEngine(job.space, job.priors, memory_limit=job.limit, seed=seed)
    rng = np.random.default_rng([seed, 99])
    records: list[TrialRecord] = []
    batch = [p.candidate for p in engine.initial_batch(min(first, budget))]
    while batch:
        for c in batch:
            records.append(job.run(c, rng, len(records)))
        engine.observe(records)
        if on_batch is not None:
            on_batch(engine)
        left = budget - len(records)
        batch = [p.candidate for p in engine.next_batch(min(q, left))] if left > 0 else []
    return records


def run_random(job: SyntheticJob, seed: int, budget: int = 30) -> list[TrialRecord]:
    """Random search: ``budget`` distinct valid points drawn uniformly over levels and patch densities."""
    rng = np.random.default_rng([seed, 7])
    return [job.run(c, rng, i) for i, c in enumerate(job.space.sample(rng, budget))]
