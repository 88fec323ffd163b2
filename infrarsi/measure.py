"""From a raw execution to metrics and an outcome, the same way for every executor.

Step time is measured over the measured steps by a statistic that holding,
batching or pacing step events can only make longer (:mod:`infrarsi.step_clock`:
the span to the bot's stamp of the last measured event, divided by the optimizer
steps in it), so warm-up steps (compilation, allocator growth) never count. A
job that prints one step line every *k* optimizer steps (``steps_per_line``)
has each line stand for *k* steps' time and tokens. A job the launcher ended
after its expected steps (it is configured for days) is judged on those steps;
its exit status is the signal we sent, not a crash.

The per-step intervals (``step_times_s``: their spread, and the clock row's
cross-check) come from the same stamps. Lines printed faster than the bot reads
them (steps of a few milliseconds) arrive several to one read and carry one
stamp: the first of them holds the whole gap and the rest none. Such a run is
shared evenly among its lines, which keeps the measured total exact. Lines that
all arrive at once (a job that buffers its output, or a toy that prints them in
microseconds) give no time at all; the doctor, which needs one, says so.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from infrarsi.seams.executor import Execution
from infrarsi.step_clock import measure_clock
from infrarsi.trial_record import Outcome, StepEvent, TrialMetrics
from infrarsi.witness import WitnessReport

_OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory", "out of memory", "std::bad_alloc",
                "DefaultCPUAllocator: can't allocate memory")
# What an accelerator's allocator says when it runs out (torch.OutOfMemoryError's message; ROCm and XPU alike).
_DEVICE_OOM_MARKERS = ("CUDA out of memory", "HIP out of memory", "XPU out of memory", "torch.OutOfMemoryError",
                       "torch.cuda.OutOfMemoryError")


def _intervals(stamps: list[float]) -> list[float]:
    return [b - a for a, b in zip(stamps, stamps[1:])]


# An interval under this share of the median gap is a line that arrived in the same read as the one
# before it (no step of a real job takes 5% of its neighbours' time).
_COALESCED = 0.05


def _shared_out(intervals: list[float]) -> list[float]:
    """Intervals with each run of coalesced lines given an even share of the gap they arrived after."""
    gaps = [t for t in intervals if t > 0]
    if not gaps:
        return list(intervals)
    floor = _COALESCED * statistics.median(gaps)
    out, start = list(intervals), 0
    while start < len(out):
        end = start + 1
        while end < len(out) and out[end] < floor:
            end += 1
        # a run of coalesced lines at the very start has no gap before it: it shares the next one
        if out[start] < floor and end < len(out):
            end += 1
            while end < len(out) and out[end] < floor:
                end += 1
        if end - start > 1:
            share = sum(out[start:end]) / (end - start)
            out[start:end] = [share] * (end - start)
        start = end
    return out


def _cv(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else None


def summarize(execution: Execution, *, warmup: int, measured: int,
              memory_limit_bytes: int | None = None, steps_per_line: int = 1) -> TrialMetrics:
    """Metrics over the measured steps (the ``measured`` step lines after ``warmup``)."""
    steps = list(execution.events)
    window = steps[warmup - 1: warmup + measured] if warmup >= 1 else []
    times = [t / steps_per_line for t in _shared_out(_intervals([e.stamp for e in window]))]
    child = [e.child_t for e in window]
    child_times = _intervals([t for t in child if t is not None]) if all(t is not None for t in child) else []
    measured_events = window[1:]
    tokens = [e.tokens for e in measured_events if e.tokens is not None]
    tokens_per_step = tokens[0] if tokens and all(t == tokens[0] for t in tokens) else (
        min(tokens) if tokens else None)
    if tokens_per_step is not None:
        tokens_per_step //= steps_per_line
    report = None
    if execution.witness and execution.witness_error is None:
        try:
            report = WitnessReport.from_dict(execution.witness)
        except (KeyError, TypeError, ValueError):
            report = None
    clock = measure_clock([e.stamp for e in window], report, warmup=warmup, measured=measured,
                          steps_per_line=steps_per_line)
    step_time = clock.step_time_s if times else None
    censored = execution.killed_for == "memory" or execution.probe_oom is not None
    peak = execution.peak_rss_bytes
    if execution.killed_for == "memory" and memory_limit_bytes is not None:
        peak = max(peak, memory_limit_bytes)
    return TrialMetrics(
        step_time_s=step_time,
        step_time_cv=_cv(times),
        step_times_s=tuple(times),
        tokens_per_step=tokens_per_step,
        tokens_per_s=(tokens_per_step / step_time) if (tokens_per_step and step_time) else None,
        peak_mem_bytes=peak,
        peak_mem_censored=censored,
        device_peak_mem_bytes=execution.device_peak_mem_bytes,
        device_steady_mem_bytes=execution.device_steady_bytes,
        device_capacity_bytes=execution.device_capacity_bytes,
        device_peak_censored=device_oom(execution),
        steady_mem_bytes=execution.steady_rss_bytes,
        loss=tuple(float(e.loss) for e in measured_events if e.loss is not None),
        warmup_loss=tuple(float(e.loss) for e in steps[:warmup] if e.loss is not None),
        child_step_time_s=statistics.median(child_times) if child_times else None,
        steps_seen=len(steps),
        steps_per_line=steps_per_line,
        steps_at_witness=_steps_before(steps, execution.witness),
        wall_s=execution.wall_s,
        phases_s=_phases(execution, first=warmup + 1, last=warmup + measured),
        parameters=_int_info(execution, "parameters"),
        embedding_parameters=_int_info(execution, "embedding_parameters"),
        witness=execution.witness,
        witness_ranks=execution.witness_ranks,
        witness_skipped=execution.witness_skipped,
        lock_checked=execution.lock_changed is not None,
        host=execution.host,
        clock=clock.how if step_time is not None else "",
        span_s=clock.span_s,
        witness_span_s=clock.witness_span_s,
        clock_steps=clock.steps,
        clock_first_step=clock.first_step,
        clock_last_step=clock.last_step,
    )


def device_oom(execution: Execution) -> bool:
    """The job itself ran out of GPU memory (not the bot's host limit): its allocator's message in the probe's
    ``oom`` event or the last of its stderr, or an ``oom`` event without one from a job that reported GPU memory
    and did not name the host's allocator."""
    failed = execution.returncode != 0 and not execution.stopped_after_steps
    if execution.killed_for == "memory" or not (failed or execution.probe_oom is not None):
        return False  # the host's limit, or a job that ran on (one that caught an OOM and retried smaller)
    said = (execution.probe_oom or "") + "\n" + execution.stderr_tail[-4000:]
    if any(marker in said for marker in _DEVICE_OOM_MARKERS):
        return True
    host = ("DefaultCPUAllocator", "std::bad_alloc")
    return (execution.probe_oom is not None and execution.device_peak_mem_bytes is not None
            and not any(m in said for m in host))


def _steps_before(steps: Sequence[StepEvent], witness: dict | None) -> int | None:
    """Step lines stamped before the witness wrote a report it wrote before exit (None: at exit, or unknown)."""
    if not witness or witness.get("at", "exit") == "exit" or witness.get("t") is None:
        return None
    return sum(1 for e in steps if e.stamp <= float(witness["t"]))


def _phases(execution: Execution, *, first: int, last: int) -> tuple[tuple[str, float], ...]:
    """Mean seconds per measured step of each phase the job marked."""
    totals: dict[str, float] = {}
    for step, name, seconds in execution.phases:
        if first <= step <= last:
            totals[name] = totals.get(name, 0.0) + seconds
    n = last - first + 1
    return tuple((name, total / n) for name, total in totals.items())


def _int_info(execution: Execution, key: str) -> int | None:
    value = dict(execution.info).get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


_TRACEBACK = "Traceback (most recent call last):"
# torch's distributed error handler prefixes every line a rank prints for an uncaught exception
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")


def error_line(tail: str) -> str:
    """What went wrong, from a crashed process's stderr: the exception its last Python traceback ended in.

    The last line is not always the error: a process can print its traceback and then die in teardown
    (a native thread still running at exit aborts with "terminate called without an active exception"),
    so the exception is kept and what came after it follows in brackets."""
    lines = [_RANK_PREFIX.sub("", line).rstrip() for line in tail.splitlines()]
    lines = [line for line in lines if line.strip()]
    if not lines:
        return "no stderr"
    start = max((i for i, line in enumerate(lines) if line.strip() == _TRACEBACK), default=None)
    if start is None:
        return lines[-1]
    # the exception is the first unindented line after the frames (3.11's carets are indented too)
    at = next((i for i in range(start + 1, len(lines)) if not lines[i][0].isspace()), None)
    if at is None or at == len(lines) - 1:
        return lines[-1]
    return f"{lines[at]} (then: {lines[-1]})"


def classify(execution: Execution, metrics: TrialMetrics, *, warmup: int, measured: int,
             tokens_per_step: int, steps_per_line: int = 1,
             memory_limit_bytes: int | None = None) -> tuple[Outcome, str]:
    """The outcome of a finished execution and the reason a person would want to read (``memory_limit_bytes``:
    the limit an OOM is told against)."""
    if execution.lock_changed:
        return Outcome.INVALID, ("lock broken where the job ran (checked by the launcher before and after): "
                                 + ", ".join(execution.lock_changed[:5]))
    if execution.killed_for == "memory":
        from infrarsi.contract.load import memory_text

        seen = memory_text(metrics.peak_mem_bytes or 0)
        return Outcome.OOM, (f"peak memory {seen} reached the limit of {memory_text(memory_limit_bytes)}; killed"
                             if memory_limit_bytes else f"peak memory reached the limit ({seen}); killed")
    if execution.probe_oom is not None:
        return Outcome.OOM, f"the job reported out-of-memory: {execution.probe_oom.strip()[:300]}"
    if execution.killed_for == "timeout":
        return Outcome.TIMEOUT, f"no exit after {execution.wall_s:.1f} s; killed"
    if execution.killed_for == "interrupt":
        return Outcome.INTERRUPTED, "the bot was interrupted while the trial ran"
    if execution.returncode != 0 and not execution.stopped_after_steps:
        tail = execution.stderr_tail.strip()
        if any(marker in tail for marker in _OOM_MARKERS):
            return Outcome.OOM, f"the job ran out of memory: {tail.splitlines()[-1][:300]}"
        how = ("no exit status" if execution.returncode is None
               else f"killed by signal {-execution.returncode}" if execution.returncode < 0
               else f"exit status {execution.returncode}")
        last = error_line(tail)[:300]
        rank = f" on rank {execution.failed_rank}" if execution.failed_rank is not None else ""
        return Outcome.CRASH, f"{how}{rank}: {last}"
    if execution.witness_error is not None:
        return Outcome.INVALID, f"witness: {execution.witness_error}"
    expected = warmup + measured
    if metrics.steps_seen < expected:
        return Outcome.INVALID, f"expected {expected} step events, saw {metrics.steps_seen}"
    per_line = tokens_per_step * steps_per_line
    bad = [e for e in execution.events if e.tokens is not None and e.tokens != per_line]
    if bad:
        return Outcome.INVALID, (f"step {bad[0].step} processed {bad[0].tokens} tokens; the contract fixes "
                                 f"{tokens_per_step} per step" + (f" ({per_line} per line of {steps_per_line} steps)"
                                                                   if steps_per_line > 1 else ""))
    if any(e.loss is not None and e.loss != e.loss for e in execution.events):
        first = next(e for e in execution.events if e.loss is not None and e.loss != e.loss)
        return Outcome.INVALID, f"loss is NaN at step {first.step}"
    return Outcome.OK, ""

