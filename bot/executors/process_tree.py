"""Watch and end a trial's whole process tree: its memory, its descendants, its group.

The trial runs in its own session (so its own process group). Memory is the
sum of resident memory over every live process of the tree, sampled; every pid
ever seen is remembered so that a descendant that left the group is still
killed at the end.
"""

from __future__ import annotations

import ctypes
import os
import signal

import psutil

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec hook: the trial's root process gets SIGKILL if the bot dies (Linux only).

    Without it a SIGKILLed bot would leave its trial running in its own session.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class ProcessTree:
    """The processes of one trial, rooted at ``pid`` (also its process group id)."""

    # Discovering descendants scans every process of the machine; memory of known
    # ones is one small read each. So descendants are rediscovered only every few
    # samples: the bot must not steal the cores it is timing.
    RESCAN_EVERY = 8

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.pgid = pid
        self.seen: dict[int, psutil.Process] = {}
        self._samples = 0
        try:
            self.seen[pid] = psutil.Process(pid)
        except psutil.Error:
            pass

    def _known_alive(self) -> list[psutil.Process]:
        alive = []
        for proc in self.seen.values():
            try:
                if proc.is_running():
                    alive.append(proc)
            except psutil.Error:
                pass
        return alive

    def _live(self) -> list[psutil.Process]:
        procs: dict[int, psutil.Process] = {}
        root = self.seen.get(self.pid)
        if root is not None:
            try:
                procs[root.pid] = root
                for child in root.children(recursive=True):
                    procs[child.pid] = child
            except psutil.Error:
                pass
        for pid, proc in self.seen.items():
            if pid not in procs and proc.is_running():
                procs[pid] = proc
        self.seen.update(procs)
        return list(procs.values())

    def rss_bytes(self) -> int:
        """Resident memory of the whole tree right now."""
        total = 0
        self._samples += 1
        procs = self._live() if self._samples % self.RESCAN_EVERY == 1 else self._known_alive()
        for proc in procs:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def kill(self) -> None:
        """SIGKILL the group and every process of the tree ever seen."""
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in self._live():
            try:
                proc.kill()  # psutil checks the pid still names the same process
            except psutil.Error:
                pass
