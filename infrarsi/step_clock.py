"""A step time no job can shrink: what holding, batching or pacing its step events can only make longer.

The bot stamps each step event the moment it reads it. A median of the
intervals between stamps can be shrunk from inside the job: hold the events
and release them half a step apart, and every interval reads half a step. A
span cannot, at its end: the last measured event arrives no earlier than the
work before it (printing it early is caught by the witness's optimizer-step
count). Its start can be delayed, though, so where the trial was witnessed the
span starts from the witness's own time for the end of the window's first
optimizer step — taken inside the job's interpreter by the bot's code, with a
clock it checks was not replaced, and authenticated — and ends at the bot's
stamp of the last measured event. Without a witness the span is the bot's own
first-to-last stamp (the search's timed runs; verification is witnessed).

Which optimizer step a line stands for is known only to within a line: a job
prints line *j* after step *jk* (the HF Trainer) or after step *(j-1)k+1*
(minGPT). The window's first and last steps are taken as the last step in
that range that had ended by the stamp of the line, and the span is divided by
the optimizer steps between them, so a delayed line moves both ends and the
quotient alike.

The witness's counted step (FLOPs and dtypes under a dispatch mode: several
times a plain step) is drawn inside the window; its time, measured by the
witness, is taken off the span and the step off the count. Making that step
longer on purpose lengthens the span by as much: nothing is gained.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from infrarsi.witness import WitnessReport

#: The bot's span of the window may be this much shorter than the witness's span of the same steps (and a
#: margin for the reader's lag behind a fast job) before the events are read as held back.
SPAN_AGREEMENT = 0.5
READER_LAG_S = 0.05
#: The bot's median interval may be this share of the witness's median optimizer step (less a pipe's jitter)
#: before the events are read as paced: honest lines follow their steps one for one.
PACED = 0.6
JITTER_S = 0.0005


@dataclass(frozen=True, kw_only=True, slots=True)
class StepClock:
    """The measured step time and how it was taken."""

    step_time_s: float | None
    how: str  # "anchored", "span" or "" (no time)
    span_s: float | None  # the bot's first-to-last stamp over the window
    witness_span_s: float | None  # the same optimizer steps by the witness's clock
    steps: int | None  # optimizer steps the span is divided by (the counted one already taken off)
    first_step: int | None = None  # anchored: the optimizer steps the span runs between, by the witness's clock
    last_step: int | None = None


def counted_window(warmup: int, measured: int, steps_per_line: int = 1) -> tuple[int, int] | None:
    """The optimizer steps the counted step may be drawn from: strictly inside the measured span whichever
    step a line stands for (None: too short a window; the counted step is then a warm-up step)."""
    k = max(1, steps_per_line)
    low, high = max(2, warmup * k + 2), (warmup + measured - 1) * k
    return (low, high) if warmup >= 1 and low <= high else None


def counted_inside(count_step: int, warmup: int, measured: int, steps_per_line: int = 1) -> bool:
    window = counted_window(warmup, measured, steps_per_line)
    return window is not None and window[0] <= count_step <= window[1]


def draw_count_step(warmup: int, measured: int, steps_per_line: int = 1,
                    rng: random.Random | None = None) -> int:
    """The optimizer step a witnessed trial counts: drawn per trial inside the measured window (the job cannot
    know it: the bot passes it on the witness's key channel), else the last warm-up step (at least the second,
    so that first-step compilation and lazy initialisation are not what is counted)."""
    window = counted_window(warmup, measured, steps_per_line)
    if window is None:
        return max(2, warmup)
    return (rng or random.SystemRandom()).randint(*window)


def _last_ended(step_t: Sequence[float], low: int, high: int, stamp: float) -> int:
    """The last optimizer step in [low, high] that had ended by ``stamp`` (``low`` when none had)."""
    best = low
    for step in range(low, min(high, len(step_t)) + 1):
        if step_t[step - 1] <= stamp:
            best = step
    return best


def measure_clock(stamps: Sequence[float], report: WitnessReport | None, *, warmup: int, measured: int,
                  steps_per_line: int = 1) -> StepClock:
    """The step time over the window's stamps (the stamp of line ``warmup`` to that of ``warmup + measured``)."""
    k = max(1, steps_per_line)
    if len(stamps) < 2:
        return StepClock(step_time_s=None, how="", span_s=None, witness_span_s=None, steps=None)
    first, last = stamps[0], stamps[-1]
    span = last - first
    inside = report is not None and report.counted_s is not None and counted_inside(
        report.count_step, warmup, measured, k)
    counted = report.counted_s if inside and report is not None and report.counted_s else 0.0
    step_t = report.step_t if report is not None else ()
    end_high = (warmup + len(stamps) - 1) * k
    if step_t and len(step_t) >= (warmup - 1) * k + 1 and first <= last:
        start = _last_ended(step_t, (warmup - 1) * k + 1, warmup * k, first)
        end = _last_ended(step_t, (warmup + len(stamps) - 2) * k + 1, end_high, last)
        # Fewer optimizer steps than the lines stand for (a job that skips updates): no anchor to read; the
        # span stands and the step-count row says what the job skipped.
        if len(step_t) >= end > start and step_t[start - 1] <= last:
            steps = end - start - (1 if inside else 0)
            anchored = last - step_t[start - 1] - counted
            witness_span = step_t[end - 1] - step_t[start - 1]
            if steps > 0 and anchored > 0:
                return StepClock(step_time_s=anchored / steps, how="anchored", span_s=span,
                                 witness_span_s=witness_span, steps=steps, first_step=start, last_step=end)
    steps = (len(stamps) - 1) * k - (1 if inside else 0)
    if steps <= 0 or span - counted <= 0:
        return StepClock(step_time_s=None, how="", span_s=span, witness_span_s=None, steps=None)
    return StepClock(step_time_s=(span - counted) / steps, how="span", span_s=span, witness_span_s=None,
                     steps=steps)


def paced(intervals: Sequence[float], report: WitnessReport | None, *, first_step: int | None,
          last_step: int | None) -> str | None:
    """Why the bot's intervals look held back and paced against the witness's (None: they agree, or there is
    no witness timeline to hold them to): the median interval (per optimizer step) far below the witness's
    median step between ``first_step`` and ``last_step``, which honest periodic work (an evaluation every few
    steps) shows on both clocks alike."""
    if report is None or not report.step_t or not intervals or not first_step or not last_step:
        return None
    t = report.step_t[first_step - 1:last_step]
    steps = [b - a for a, b in zip(t, t[1:])]
    i = report.count_step - first_step - 1  # the counted step's own interval: several times a plain one
    if report.counted_s is not None and 0 <= i < len(steps):
        steps.pop(i)
    if len(steps) < 2:
        return None
    theirs = statistics.median(steps)
    mine = statistics.median(intervals)
    if mine < PACED * theirs - JITTER_S:
        return (f"the step events arrived {mine * 1000:.2f} ms apart (median) while the optimizer stepped every "
                f"{theirs * 1000:.2f} ms by the witness's clock: events were held back and paced")
    return None
