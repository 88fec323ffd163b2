"""Watch one launched trial until it exits or must be killed: the loop every process executor shares.

The executor says how to sample the trial's memory and how to kill everything
it started; this loop owns the rest — the memory limit, the timeout, an
interrupt, per-step progress, and reaping the root so that no zombie or
survivor is left, whatever happens (an exception included).
"""

from __future__ import annotations

import os
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


def supervise(proc: subprocess.Popen, spec: TrialSpec, *, start: float, sample: Callable[[], int],
              kill: Callable[[], None], stop: threading.Event, interval_s: float,
              steps: Callable[[], int], on_step: Callable[[int], None] | None) -> Supervised:
    peak = 0
    killed: KillReason | None = None
    status: int | None = None
    maxrss = 0
    reported = 0
    try:
        while True:
            pid, raw_status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                status = os.waitstatus_to_exitcode(raw_status)
                maxrss = usage.ru_maxrss * 1024  # kilobytes on Linux
                break
            peak = max(peak, sample())
            if spec.memory_limit_bytes is not None and peak >= spec.memory_limit_bytes:
                killed = "memory"
            elif time.perf_counter() - start > spec.timeout_s:
                killed = "timeout"
            elif stop.is_set():
                killed = "interrupt"
            if killed:
                kill()
                status = os.waitstatus_to_exitcode(os.wait4(proc.pid, 0)[1])
                break
            if on_step and steps() != reported:
                reported = steps()
                on_step(reported)
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
    return Supervised(status=status, killed_for=killed, peak_bytes=peak, maxrss_bytes=maxrss, wall_s=wall)
