"""The machine's drift during a search, measured by baseline controls, so that trials are compared like with like.

A search trial made now and the doctor's baseline measured an hour ago are not
comparable on a machine whose speed drifts by 30% in an hour (seen here: the
same baseline at 2.71-4.31 s/step within the hour): the search would rank drift
as speed. So the run stage re-runs the baseline between search trials
(*controls*, :class:`ControlSchedule` decides when) and every trial's step time
is read against the machine's speed when it ran: its log step time minus the
log drift interpolated between the controls around it, in trial order (the
doctor's own baseline runs anchor the start at no drift). The engine, the
ranking for verification and every figure the run prints use these adjusted
times, and each says which control it was read against. Where two controls
disagree the machine changed somewhere between them, and no interpolation can
say where: the trials of that stretch that could rank among the best are
measured again right after the later control (:meth:`Drift.unsettled`,
``bot/stages/run/search.py``).

Pure: the run stage hands over the records.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from infrarsi.trial_record import Outcome, TrialRecord


@dataclass(frozen=True, kw_only=True, slots=True)
class Drift:
    """Log drift (this machine's log step time of the baseline minus the doctor's) at the controls' times."""

    base_s: float  # the doctor's median baseline step time
    times: tuple[float, ...] = ()  # the controls' trial numbers (the doctor's last run for the anchor), increasing
    offsets: tuple[float, ...] = ()  # log(control step time / base_s) at each
    trials: tuple[int | None, ...] = ()  # the control's trial number (None: the doctor's runs)

    @staticmethod
    def measure(base_s: float, anchors: Sequence[TrialRecord], controls: Sequence[TrialRecord]) -> Drift:
        """From the doctor's baseline runs (``anchors``: no drift by definition, at their time) and the controls
        run since."""
        points: list[tuple[float, float, int | None]] = []
        good = [r for r in anchors if r.outcome is Outcome.OK and r.metrics.step_time_s]
        if good:
            points.append((float(max(r.trial_no for r in good)), 0.0, None))
        for r in controls:
            if r.outcome is Outcome.OK and r.metrics.step_time_s:
                points.append((float(r.trial_no), math.log(r.metrics.step_time_s / base_s), r.trial_no))
        points.sort(key=lambda p: p[0])
        return Drift(base_s=base_s, times=tuple(p[0] for p in points), offsets=tuple(p[1] for p in points),
                     trials=tuple(p[2] for p in points))

    def offset_at(self, t: float) -> float:
        """The log drift at trial ``t``: linear between the controls around it, the nearest one's outside them."""
        if not self.times:
            return 0.0
        i = bisect.bisect_left(self.times, t)
        if i == 0:
            return self.offsets[0]
        if i >= len(self.times):
            return self.offsets[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        w = (t - t0) / (t1 - t0) if t1 > t0 else 0.5
        return self.offsets[i - 1] + w * (self.offsets[i] - self.offsets[i - 1])

    def nearest(self, t: float) -> int | None:
        """The control (trial number) nearest trial ``t``; None when that is the doctor's runs or there is none."""
        if not self.times:
            return None
        i = min(range(len(self.times)), key=lambda k: abs(self.times[k] - t))
        return self.trials[i]

    def adjusted(self, record: TrialRecord) -> TrialRecord:
        """``record`` with its step times read at the doctor's machine speed (what the engine observes)."""
        m = record.metrics
        if record.outcome is not Outcome.OK or not m.step_time_s or not self.times:
            return record
        factor = math.exp(self.offset_at(record.trial_no))
        return replace(record, metrics=replace(m, step_time_s=m.step_time_s / factor,
                                               step_times_s=tuple(t / factor for t in m.step_times_s)))

    def describe(self, record: TrialRecord) -> str:
        """Against which baseline a trial's speedup was taken, in words."""
        t = record.trial_no
        control = self.nearest(t)
        speed = math.exp(self.offset_at(t))
        where = f"the baseline control of trial {control}" if control is not None else "the doctor's baseline"
        return f"against {where} ({self.base_s * speed * 1000:.1f} ms/step at that time, x{speed:.2f} the doctor's)"


    def unsettled(self, sigma_log: float) -> tuple[float, float, float] | None:
        """When the last two controls disagree by more than twice the run-to-run noise: (the earlier control's
        trial, the later's, the larger of their two log drifts), else None. Trials between them were read at a
        speed no interpolation can tell."""
        if len(self.offsets) < 2 or abs(self.offsets[-1] - self.offsets[-2]) <= 2 * max(sigma_log, 0.01):
            return None
        return self.times[-2], self.times[-1], max(self.offsets[-2], self.offsets[-1])


@dataclass
class ControlSchedule:
    """When the next baseline control runs: after ``interval`` search trials, the interval halving (down to
    ``shortest``) when the last two controls disagree by more than the run-to-run noise allows, growing by one
    (up to ``longest``) when they agree."""

    sigma_log: float
    interval: int = 3
    shortest: int = 2
    longest: int = 6
    since: int = 0  # search trials since the last control

    def trial_done(self) -> None:
        self.since += 1

    def due(self) -> bool:
        return self.since >= self.interval

    def control_done(self, drift: Drift) -> None:
        self.since = 0
        if len(drift.offsets) >= 2:
            moved = abs(drift.offsets[-1] - drift.offsets[-2])
            if moved > 2 * max(self.sigma_log, 0.01):
                self.interval = max(self.shortest, self.interval // 2)
            else:
                self.interval = min(self.longest, self.interval + 1)
