"""How many CPU cores a job launched from here may use: the domain of a thread-count knob.

``os.cpu_count()`` counts the machine's cores; a job pinned by ``taskset``, a
container's cpuset or a Slurm allocation can run on fewer, and a thread count
above that only oversubscribes them. The affinity mask is what the job inherits.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity call on this platform (macOS)
        return os.cpu_count() or 1
