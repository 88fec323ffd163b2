"""Waiting on a training job's process instead of sleeping a fixed time and hoping it started."""

from __future__ import annotations

import time
from pathlib import Path

import psutil


def jobs_of(repo: Path) -> list[psutil.Process]:
    """Live processes running a ``train.py`` whose working directory is ``repo`` or inside it (a worktree)."""
    out = []
    for proc in psutil.process_iter(["cmdline", "cwd", "status"]):
        try:
            cwd = proc.info["cwd"]
            if proc.info["status"] != psutil.STATUS_ZOMBIE and cwd and Path(cwd).is_relative_to(repo) \
                    and any("train.py" in part for part in proc.info["cmdline"] or []):
                out.append(proc)
        except psutil.Error:
            pass
    return out


def wait_for_job(repo: Path, *, timeout_s: float = 120.0) -> list[psutil.Process]:
    """Block until a job of ``repo`` is running (the event a kill-mid-trial test needs); fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = jobs_of(repo)
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"no training job of {repo} started within {timeout_s:.0f} s")
