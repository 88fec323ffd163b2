"""What else the host was doing while a trial ran: the kernel's CPU pressure stall and the hypervisor's steal.

Read by the launcher where the trial runs (a runner, a Slurm node), before and after, and recorded with the
execution; :mod:`infrarsi.disturbance` decides whether the trial was disturbed from outside. Linux only:
``/proc/pressure/cpu`` exists from kernel 4.20 with PSI enabled, ``/proc/stat`` everywhere; a counter the
host does not have is left out (never read as zero).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_PSI = Path("/proc/pressure/cpu")
_STAT = Path("/proc/stat")


@dataclass(frozen=True, kw_only=True, slots=True)
class HostCounters:
    psi_some_us: int | None  # cumulative microseconds in which some runnable task waited for a CPU
    steal_ticks: int | None  # cumulative ticks the hypervisor ran someone else on this VM's CPUs

    @staticmethod
    def read() -> HostCounters:
        return HostCounters(psi_some_us=_psi_some(), steal_ticks=_steal())


def _psi_some() -> int | None:
    try:
        for line in _PSI.read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _steal() -> int | None:
    try:
        fields = _STAT.read_text().splitlines()[0].split()
        return int(fields[8]) if fields[0] == "cpu" and len(fields) > 8 else None
    except (OSError, ValueError, IndexError):
        return None


def host_facts(before: HostCounters, after: HostCounters, *, cpu_s: float | None) -> tuple[tuple[str, float], ...]:
    """``Execution.host``: the trial's own CPU seconds (its process tree's, from the kernel), and the host's
    CPU pressure stall and steal over the trial, in seconds; the host's CPU count beside them."""
    out: list[tuple[str, float]] = [("cpus", float(os.cpu_count() or 1))]
    if cpu_s is not None:
        out.append(("cpu_s", round(cpu_s, 4)))
    if before.psi_some_us is not None and after.psi_some_us is not None:
        out.append(("psi_some_s", round((after.psi_some_us - before.psi_some_us) / 1e6, 4)))
    if before.steal_ticks is not None and after.steal_ticks is not None:
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        out.append(("steal_s", round((after.steal_ticks - before.steal_ticks) / hz, 4)))
    return tuple(out)


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) ticks over all CPUs since boot, from /proc/stat's first line."""
    try:
        fields = [int(v) for v in _STAT.read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already in user
    return total - idle, total


#: How long one look at the host's busy share lasts.
HOST_SAMPLE_S = 0.2


def busy_share(interval_s: float = HOST_SAMPLE_S, sleep=None) -> float | None:  # noqa: ANN001
    """The share of all CPUs busy over ``interval_s`` (None: /proc/stat unreadable). Read while the bot runs no
    trial, it is what everything else on the host takes."""
    import time

    before = _cpu_ticks()
    (sleep or time.sleep)(interval_s)
    after = _cpu_ticks()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])
