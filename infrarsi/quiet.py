"""Runs the machine disturbed are run again, and a machine that will not sit still gives "not now".

A run disturbed from outside (:mod:`infrarsi.disturbance`: the host's CPU
pressure, steal, or a process tree starved of CPU) is run again rather than
counted, at most ``rerun_budget`` times. When the budget is spent and the next
run is disturbed too, the machine is waited for — bounded backoff, on the
host's busy share between runs (what everything but the bot takes: the bot
runs nothing while it waits) against the share when the stage started — and
the run is made again once it is quiet. When it never becomes quiet within
the wait budget, :class:`MachineBusy` says so: the caller's answer is
"inconclusive", never a verdict the load decided. Used by verification and by
the doctor's baseline repeats alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from infrarsi.disturbance import disturbance
from infrarsi.errors import NOT_RIGHT, InfraRSIError
from infrarsi.trial_record import TrialRecord

#: The machine reads quiet when everything else takes at most this share of all CPUs more than it did when
#: the stage started (a quarter: one busy core of four, half of one of two).
QUIET_MARGIN = 0.25
#: Other work taking more than this share of all CPUs is a busy machine, whatever it was when the stage began.
BUSY_CEILING = 0.6
#: The first wait, doubled after each busy look, never above the cap.
FIRST_WAIT_S = 5.0
MAX_WAIT_S = 60.0


class MachineBusy(InfraRSIError):
    """The machine stayed busy for the whole wait budget (a verification says ``inconclusive``; a doctor that
    could not get two undisturbed runs stops with it)."""

    exit_code = NOT_RIGHT


@dataclass
class QuietWait:
    """Bounded waiting for the host to become as quiet as it was when the stage started."""

    budget_s: float
    progress: Callable[[str], None] = lambda _: None
    # the executor's view of the host where trials run (Executor.host_busy); None from it: cannot be seen
    busy: Callable[[], float | None] = lambda: None
    sleep: Callable[[float], None] = time.sleep
    waited_s: float = 0.0
    threshold: float | None = None

    def calibrate(self) -> None:
        """The host's busy share now, before the stage's first run: what "quiet" is held to — never more than
        :data:`BUSY_CEILING`, so a stage that starts on a saturated machine waits instead of comparing runs that
        no measurement could tell were disturbed."""
        share = self.busy()
        self.threshold = min((share if share is not None else 0.0) + QUIET_MARGIN, BUSY_CEILING)

    def quiet(self) -> tuple[bool, float | None]:
        share = self.busy()
        if share is None:
            return True, None  # the host says nothing: nothing to wait for
        if self.threshold is None:
            self.threshold = QUIET_MARGIN
        return share <= self.threshold, share

    def until_quiet(self) -> bool:
        """Wait (backoff: 5 s, 10 s, ... at most 60 s between looks) until the host is quiet or the budget is
        spent; True when it is quiet. A host that cannot be seen from here (a runner's, a scheduler's node) is
        waited for once, a first backoff's worth, and then tried again."""
        pause = FIRST_WAIT_S
        while True:
            ok, share = self.quiet()
            left = self.budget_s - self.waited_s
            if share is None:
                step = max(0.0, min(pause, left))
                if step:
                    self.progress(f"waiting {step:.0f} s before the next run (the host where trials run cannot be "
                                  "seen from here)")
                    self.sleep(step)
                    self.waited_s += step
                return True
            if ok:
                if self.waited_s:
                    self.progress(f"the machine is quiet again ({share:.0%} of its CPUs busy): going on")
                return True
            if left <= 0:
                return False
            step = min(pause, left)
            self.progress(f"the machine is busy ({share:.0%} of its CPUs taken by other work, quiet is "
                          f"{self.threshold:.0%}): waiting {step:.0f} s ({self.waited_s:.0f} of "
                          f"{self.budget_s:.0f} s waited)")
            self.sleep(step)
            self.waited_s += step
            pause = min(MAX_WAIT_S, pause * 2)


@dataclass
class DisturbanceGuard:
    """One stage's runs, each run again while the host says something outside disturbed it."""

    rerun_budget: int
    wait: QuietWait
    progress: Callable[[str], None] = lambda _: None
    reruns: list[int] = field(default_factory=list)  # trials run again, in order
    disturbed: list[int] = field(default_factory=list)  # every trial found disturbed (re-run or not)
    spent: int = 0  # re-runs made without waiting, against the budget
    waits: int = 0  # re-runs made after waiting for quiet

    def run(self, launch: Callable[[], TrialRecord], reference: Callable[[], Sequence[TrialRecord]],
            *, same_arm: Callable[[], bool] = lambda: True, alone: bool = True) -> TrialRecord:
        """A run of ``launch()`` that nothing outside disturbed, compared with ``reference()`` (undisturbed runs
        of the same arm, or the baseline's when ``same_arm()`` is False; ``alone=False``: not judged without
        one); :class:`MachineBusy` when the machine stayed busy after the re-run budget was spent."""
        while True:
            busy, share = self.wait.quiet()
            if not busy:
                # something started on the host since the stage began: wait before spending a run on it
                self.progress(f"the machine is busier than when this stage started ({share:.0%} of its CPUs "
                              "taken by other work)")
                if not self.wait.until_quiet():
                    raise MachineBusy(f"the machine stayed busy before a trial could run: {share:.0%} of its CPUs "
                                      f"taken by other work, and {self.wait.waited_s:.0f} s of waiting for quiet "
                                      "did not end it")
            record = launch()
            why = disturbance(record, reference(), same_arm=same_arm(), alone=alone)
            if why is None:
                return record
            self.disturbed.append(record.trial_no)
            if self.spent < self.rerun_budget:
                self.spent += 1
                self.reruns.append(record.trial_no)
                self.progress(f"disturbed from outside, run again: {why}")
                continue
            self.progress(f"disturbed from outside again ({why}) with the {self.rerun_budget} re-runs spent: "
                          "waiting for the machine to become quiet")
            self.waits += 1
            # a host that reads quiet between runs while every run is disturbed is not quiet: as many runs again
            # after waiting as the budget allowed, then no answer
            if self.waits > max(1, self.rerun_budget) or not self.wait.until_quiet():
                waited = (f"{self.wait.waited_s:.0f} s of waiting for quiet did not end it" if self.wait.waited_s
                          else "the host was as busy between runs as when the stage started, so there was no "
                               "quiet to wait for")
                raise MachineBusy(f"the machine stayed busy: {len(self.disturbed)} trial(s) disturbed from outside "
                                  f"({', '.join(map(str, self.disturbed))}; the last: {why}), and {waited}")
            self.reruns.append(record.trial_no)
