"""Which process owns a trial worktree, so gc can tell a live trial from a dead one.

A run killed with SIGKILL (OOM killer, preempted node, Ctrl-\\) never reaches the
cleanup in :func:`bot.workspace.worktrees.trial_worktree`; its worktree directory is
still there and looks perfectly valid to git. To recognise it we record the
creating process in the worktree's own git metadata directory
(``<git-dir>/worktrees/<name>/infrarsi-owner.json``): git ignores unknown files
there, and pruning the worktree deletes the record with it.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

OWNER_FILE = "infrarsi-owner.json"

#: Tolerance when comparing process start times (psutil rounds differently
#: across platforms); a recycled PID starts much later than this.
_START_TIME_SLACK_S = 1.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Owner:
    """The process that created a trial worktree."""

    pid: int
    host: str
    started: float
    run_id: str
    trial_no: int

    @classmethod
    def current(cls, *, run_id: str, trial_no: int) -> Owner:
        pid = os.getpid()
        return cls(
            pid=pid,
            host=socket.gethostname(),
            started=psutil.Process(pid).create_time(),
            run_id=run_id,
            trial_no=trial_no,
        )

    def is_alive(self) -> bool:
        """Whether the owner process still runs (conservatively ``True`` if unknowable).

        A different host cannot be checked from here, so it counts as alive.
        The start time guards against a recycled PID.
        """
        if self.host != socket.gethostname():
            return True
        try:
            process = psutil.Process(self.pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            return abs(process.create_time() - self.started) <= _START_TIME_SLACK_S
        except psutil.NoSuchProcess:
            return False
        except psutil.AccessDenied:
            return True

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def write_owner(admin_dir: Path, owner: Owner) -> None:
    """Record ``owner`` in a worktree's metadata dir (atomically: write then rename)."""
    tmp = admin_dir / f".{OWNER_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(asdict(owner)))
    os.replace(tmp, admin_dir / OWNER_FILE)


def read_owner(admin_dir: Path) -> Owner | None:
    """The recorded owner, or ``None`` if absent or unreadable (e.g. made by plain git)."""
    try:
        data = json.loads((admin_dir / OWNER_FILE).read_text())
        return Owner(
            pid=int(data["pid"]),
            host=str(data["host"]),
            started=float(data["started"]),
            run_id=str(data["run_id"]),
            trial_no=int(data["trial_no"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
