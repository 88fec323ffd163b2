"""The run's state between its phases, and the mechanics every search trial shares: run it, learn from it, say it,
and run the baseline control the machine's drift asks for (``bot/stages/run/search.py`` reads as the phases).

Everything here is rebuilt from the journal on ``--resume`` (``SearchLoop.begin``), so a killed bot goes on
without repeating a finished trial.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bot.patching.screen import Screening, screen_patches
from bot.stages.run.candidate import TrialContext
from infrarsi.doctor import DoctorReport
from infrarsi.journal import Journal
from infrarsi.patches import PatchSpec
from infrarsi.search.acquisition import Proposal
from infrarsi.search.blame import Judgements
from infrarsi.search.drift import ControlSchedule, Drift
from infrarsi.search.engine import SearchEngine
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import QUARANTINED, Candidate, Outcome, TrialRecord
from infrarsi.verdict import Reference, trial_invariants

Progress = Callable[[dict[str, Any]], None]
Rebuild = Callable[["SearchLoop", Sequence[TrialRecord]], tuple[SearchSpace, SearchEngine]]


def emit(progress: Progress, **event: Any) -> None:
    progress(event)


@dataclass(kw_only=True)
class SearchLoop:
    """What the phases share: the context, the doctor, the judged patches, the space and its engine, every search
    trial and baseline control so far and the machine's drift they measure."""

    ctx: TrialContext
    run_id: str
    doctor: DoctorReport
    progress: Progress
    budget_trials: int
    budget_seconds: float | None
    parallel: int
    rebuild: Rebuild  # the space and engine again over ``records`` (the patches or the judged ones changed)
    space: SearchSpace
    engine: SearchEngine
    session: Any = None
    screening: Screening | None = None
    judged: Judgements = field(default_factory=Judgements)
    search: list[TrialRecord] = field(default_factory=list)
    controls: list[TrialRecord] = field(default_factory=list)
    anchors: list[TrialRecord] = field(default_factory=list)  # the doctor's baseline runs: no drift by definition
    superseded: set[int] = field(default_factory=set)  # measured while the machine's speed changed: measured again
    state_path: Path | None = None
    started: float = field(default_factory=time.time)
    drift: Drift | None = None
    schedule: ControlSchedule | None = None

    def __post_init__(self) -> None:
        if self.drift is None:
            self.drift = Drift.measure(self.doctor.median_s, self.anchors, self.controls)
        if self.schedule is None:
            self.schedule = ControlSchedule(sigma_log=self.doctor.sigma_log)

    @property
    def baseline(self) -> Candidate:
        return Candidate.of(self.ctx.contract.defaults())

    def settled(self) -> list[TrialRecord]:
        """The search trials that count: a trial measured again after the machine's speed changed counts once."""
        return [r for r in self.search if r.trial_no not in self.superseded]

    def spent(self) -> bool:
        if len(self.settled()) >= self.budget_trials:
            return True
        return self.budget_seconds is not None and time.time() - self.started >= self.budget_seconds

    def adjusted_ok(self) -> list[float]:
        assert self.drift is not None
        return [t for r in self.settled() if r.outcome is Outcome.OK
                and (t := self.drift.adjusted(r).metrics.step_time_s)]

    def reread(self) -> None:
        """The space and engine again over every record so far, read at the machine's speed when each ran."""
        assert self.drift is not None
        self.space, self.engine = self.rebuild(self, [self.drift.adjusted(r) for r in
                                                     self.ctx.journal.trials(self.run_id)
                                                     if r.trial_no not in self.superseded])

    # -- one batch of search trials -------------------------------------------------------------------------
    def run(self, proposals: list[Proposal]) -> None:
        """Run ``proposals`` (``parallel`` at a time), learn from each and say it."""
        assert self.drift is not None and self.schedule is not None
        for proposal, record in zip(proposals, run_batch(self.ctx, self.run_id, [p.candidate for p in proposals],
                                                         self.parallel)):
            self.search.append(record)
            self.schedule.trial_done()
            if self.judge(record):  # a patch judged invalid: never again
                self.reread()
            self.engine.observe([self.drift.adjusted(record)])
            self._said(record, proposal)

    def _said(self, record: TrialRecord, proposal: Proposal) -> None:
        assert self.drift is not None
        failed = [r for r in self.search if r.outcome is not Outcome.OK]
        ok = self.adjusted_ok()
        remaining = self.budget_trials - len(self.settled())
        mean_cost = statistics.fmean(r.cost_s for r in self.search)
        read = self.drift.adjusted(record).metrics.step_time_s
        base_time = self.doctor.median_s
        emit(self.progress, event="trial", n=len(self.settled()), total=self.budget_trials, trial_no=record.trial_no,
             candidate=record.candidate.describe(), origin=proposal.origin, outcome=record.outcome.value,
             reason=record.reason, step_time_s=record.metrics.step_time_s, cost_s=record.cost_s,
             speedup=(base_time / read) if read else None, against=self.drift.describe(record),
             control_trial=self.drift.nearest(record.trial_no),
             best_speedup=(base_time / min(ok)) if ok else None, failures=len(failed),
             failed_cost_s=sum(r.cost_s for r in failed), eta_s=remaining * mean_cost)

    # -- learning from a trial ------------------------------------------------------------------------------
    def judge(self, record: TrialRecord) -> bool:
        """Learn from one search trial; True when it got a patch judged invalid (the space must shrink)."""
        if vindicates(record, self.doctor):
            self.judged.vindicate(record.candidate.patches)
        # a patch whose trials crash the same way under other knob settings is blamed at that first repeat
        crash = self.judged.repeated_crash(record) if record.outcome is Outcome.CRASH else None
        if (record.outcome is not Outcome.INVALID and crash is None) or not record.candidate.patches:
            return False
        before = set(self.judged.patches)
        blamed, why = crash or (record.candidate, f"trial {record.trial_no}: {record.reason}")
        blame(self.judged, blamed, why, self.session, self.progress)
        return set(self.judged.patches) != before

    # -- the baseline control ------------------------------------------------------------------------------
    def control(self, worth_measuring_again: Callable[..., list[TrialRecord]]) -> None:
        """Run the baseline now and re-read every trial against the machine's speed around it; where the machine
        changed since the last control, measure again what could rank among the best (Drift.unsettled). The
        control is witnessed, as verification's baseline runs are: the last one before verification is its first
        pair's baseline."""
        assert self.schedule is not None
        doctor, contract = self.doctor, self.ctx.contract
        record = self.ctx.run(self.run_id, self.baseline, witness=True)
        self.controls.append(record)
        self.drift = Drift.measure(doctor.median_s, self.anchors, self.controls)
        self.schedule.control_done(self.drift)
        unsettled = self.drift.unsettled(doctor.sigma_log)
        if unsettled is not None:
            for old in worth_measuring_again(self.settled(), self.drift, unsettled, contract.verify.top_k):
                emit(self.progress, event="remeasure", trial_no=old.trial_no, candidate=old.candidate.describe(),
                     message=f"the machine's speed changed between controls around trial {old.trial_no} "
                             f"({old.candidate.describe()}): measured again next to the new control")
                self.superseded.add(old.trial_no)
                self.search.append(self.ctx.run(self.run_id, old.candidate))
            self.save()
        self.reread()
        speed = math.exp(self.drift.offsets[-1]) if self.drift.offsets else 1.0
        emit(self.progress, event="control", trial_no=record.trial_no, outcome=record.outcome.value,
             step_time_s=record.metrics.step_time_s, drift=speed, next_after=self.schedule.interval,
             message=(f"baseline control (trial {record.trial_no}): "
                      + (f"{record.metrics.step_time_s * 1000:.1f} ms/step, the machine runs x{speed:.2f} the "
                         f"doctor's time; trials are read against it (next control after {self.schedule.interval} "
                         "trials)" if record.outcome is Outcome.OK and record.metrics.step_time_s else
                         f"{record.outcome.value} {record.reason[:120]}")))

    # -- what a killed bot leaves for --resume --------------------------------------------------------------
    def save(self, *, verification_from: int | None = None) -> None:
        if self.state_path is None:
            return
        import json

        state: dict[str, Any] = {"superseded": sorted(self.superseded)}
        if verification_from is not None:
            state["verification_from"] = verification_from
        self.state_path.write_text(json.dumps(state), encoding="utf-8")

    # -- the patches a model proposes between batches --------------------------------------------------------
    def screen(self, patches: list[PatchSpec]) -> Screening | None:
        """Judge ``patches`` on the base commit (None outside git: no patch can run there)."""
        return screened(self.ctx, patches, self.session, self.progress,
                        claims=self.screening.claims if self.screening is not None else None)

    def grow(self, new: list[PatchSpec]) -> None:
        """Screen a model's new patches with the accepted ones; a larger space rebuilds the engine over every record."""
        found = self.screen([*self.ctx.patches.values(), *new]) if new else None
        if found is not None and len(found.accepted) > len(self.ctx.patches):
            self.screening = found
            self.ctx = replace(self.ctx, patches={p.id: p for p in found.accepted})
            self.space, self.engine = self.rebuild(self, self.ctx.journal.trials(self.run_id))


def screened(ctx: TrialContext, patches: list[PatchSpec], session: Any, progress: Progress,
             claims: Any = None) -> Screening | None:
    """Judge ``patches`` on the base commit (None outside git: no patch can run there)."""
    read = ctx.base_reader() if patches else None
    if read is None:
        return None
    screening = screen_patches(read, patches, ctx.contract.scope, claims=claims)
    quarantined = screening.quarantined
    for pid, why in sorted(screening.rejected.items()):
        verdict = "quarantined" if pid in quarantined else "rejected"
        findings = why.removeprefix(QUARANTINED)  # a quarantined patch's lines, named
        if session is None or session.judge(pid, verdict, findings):
            emit(progress, event="patch", patch=pid, verdict=verdict,
                 message=f"patch {pid} quarantined for review when proposed, never run: {findings}"
                 if pid in quarantined else f"patch {pid} rejected when proposed: {why}")
    return screening


def vindicates(record: TrialRecord, doctor: DoctorReport) -> bool:
    """A search trial that ran ok with its loss inside the baseline's band vindicates its patches (an unwitnessed
    trial is read against the band of printed losses, all it has)."""
    band = doctor.printed_band if doctor.printed_band is not None and not record.metrics.witness else doctor.loss_band
    if record.outcome is not Outcome.OK or band is None:
        return False
    if doctor.measured_steps:  # the run's window, when the doctor shortened it
        band = band.window(doctor.measured_steps, record.metrics.steps_per_line)
    rows = trial_invariants(record, Reference(work=None, band=band))
    return all(c.ok for c in rows if c.name in ("loss_band", "final_loss"))


def blame(judged: Judgements, candidate: Candidate, reason: str, session: Any, progress: Progress) -> None:
    for pid in judged.judge(candidate, reason):
        if session is not None:
            session.judge(pid, "invalid", reason)
        emit(progress, event="patch", patch=pid, verdict="invalid",
             message=f"patch {pid} judged invalid ({reason[:300]}): excluded from later candidates")


def run_batch(ctx: TrialContext, run_id: str, candidates: list[Candidate], parallel: int) -> Iterator[TrialRecord]:
    """Run a batch: one after another, or ``parallel`` at a time, each thread with its own journal connection.

    Records are yielded in the batch's order as soon as each is done, so progress
    is reported per trial rather than per batch.
    """
    if parallel <= 1 or len(candidates) <= 1:
        for c in candidates:
            yield ctx.run(run_id, c)
        return

    def isolated(candidate: Candidate) -> TrialRecord:
        with Journal(ctx.journal.path) as journal:
            return replace(ctx, journal=journal).run(run_id, candidate)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        yield from pool.map(isolated, candidates)
