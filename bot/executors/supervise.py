"""Watch one launched trial until it exits or must be killed: the loop every process executor shares.

The executor says how to sample the trial's memory and how to kill everything
it started; this loop owns the rest — the memory limit, the timeout, an
interrupt, per-step progress, ending a job once every step it measures was
seen (a real job is configured for days: SIGTERM to its group, a grace period,
then SIGKILL), and reaping the root so that no zombie or survivor is left,
whatever happens (an exception included).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from infrarsi.seams.executor import KillReason, TrialSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class Supervised:
    status: int  # exit code as ``Popen.returncode`` reads it (negative: a signal)
    killed_for: KillReason | None
    peak_bytes: int  # the largest sample
    maxrss_bytes: int  # the kernel's high-water mark of the root process (0 when it was killed)
    wall_s: float
    steady_bytes: int | None = None  # the least sample between two step lines (None: fewer than two)
    stopped: bool = False  # ended by us after the expected steps (not a failure)
    cpu_s: float | None = None  # user + system CPU of the root and every descendant it reaped (the kernel's)


# After the last expected step the job gets LINGER_S to exit by itself (its final
# probe events, e.g. device memory, come then), then SIGTERM, then GRACE_S to exit.
LINGER_S = 1.0
GRACE_S = 5.0


def _terminate_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def supervise(proc: subprocess.Popen, spec: TrialSpec, *, start: float, sample: Callable[[], int],
              kill: Callable[[], None], stop: threading.Event, interval_s: float,
              steps: Callable[[], int], on_step: Callable[[int], None] | None,
              terminate: Callable[[], None] | None = None, linger_s: float = LINGER_S,
              grace_s: float = GRACE_S) -> Supervised:
    """Wait for ``proc``; ``terminate`` (default: SIGTERM to its group) ends it politely once
    ``spec.expected_steps`` step events were seen; ``kill`` ends everything for good."""
    peak = 0
    steady: int | None = None
    window_steps, window_low = 0, None  # step lines seen when the current window opened; its least sample
    seen_all: float | None = None  # when the last expected step arrived
    terminated: float | None = None  # when SIGTERM was sent
    killed: KillReason | None = None
    status: int | None = None
    maxrss = 0
    cpu: float | None = None
    reported = 0
    try:
        while True:
            pid, raw_status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                status = os.waitstatus_to_exitcode(raw_status)
                maxrss = usage.ru_maxrss * 1024  # kilobytes on Linux
                cpu = usage.ru_utime + usage.ru_stime
                break
            now_bytes = sample()
            peak = max(peak, now_bytes)
            # What the job holds across steps (runtime, weights, optimizer state): a step's transient
            # memory comes and goes, so the least sample between two step lines is the part no step adds.
            # A window counts once the next step line closes it: after the last one the job tears down.
            done = steps()
            if done != window_steps:
                if window_steps >= 1 and window_low is not None:
                    steady = window_low if steady is None else min(steady, window_low)
                window_steps, window_low = done, None
            if done >= 1 and now_bytes > 0:  # 0: no process of the tree could be read this time
                window_low = now_bytes if window_low is None else min(window_low, now_bytes)
            if spec.memory_limit_bytes is not None and peak >= spec.memory_limit_bytes:
                killed = "memory"
            elif time.perf_counter() - start > spec.timeout_s:
                killed = "timeout"
            elif stop.is_set():
                killed = "interrupt"
            if killed:
                kill()
                _, raw, usage = os.wait4(proc.pid, 0)
                status, cpu = os.waitstatus_to_exitcode(raw), usage.ru_utime + usage.ru_stime
                break
            if on_step and steps() != reported:
                reported = steps()
                on_step(reported)
            now = time.perf_counter()
            if spec.expected_steps and seen_all is None and steps() >= spec.expected_steps:
                seen_all = now
            if seen_all is not None and terminated is None and now - seen_all >= linger_s:
                (terminate or (lambda: _terminate_group(proc)))()
                terminated = now
            elif terminated is not None and now - terminated >= grace_s:
                kill()
                _, raw, usage = os.wait4(proc.pid, 0)
                status, cpu = os.waitstatus_to_exitcode(raw), usage.ru_utime + usage.ru_stime
                break
            time.sleep(interval_s)
    except BaseException:
        kill()
        raise
    finally:
        wall = time.perf_counter() - start
        kill()  # descendants outlive the root otherwise
        if status is None:
            try:
                status = os.waitstatus_to_exitcode(os.wait4(proc.pid, 0)[1])
            except ChildProcessError:
                status = -9
        proc.returncode = status  # we reaped it; Popen must not wait again
    return Supervised(status=status, killed_for=killed, peak_bytes=peak, maxrss_bytes=maxrss, wall_s=wall,
                      steady_bytes=steady or None, stopped=terminated is not None and killed is None, cpu_s=cpu)
