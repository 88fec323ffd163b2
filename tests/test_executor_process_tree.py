"""A trial's whole process tree: its memory summed over every process, and every process ended at the end."""

from __future__ import annotations

import subprocess
import time

import psutil

from bot.executors.process_tree import ProcessTree, die_with_parent

# A root that starts a child in its group and one that leaves the group (its own session), then waits.
_ROOT = "sleep 30 & setsid sleep 30 & wait"


def _children(pid: int, n: int) -> list[psutil.Process]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        kids = psutil.Process(pid).children(recursive=True)
        if len(kids) >= n:
            return kids
        time.sleep(0.01)
    raise AssertionError(f"{pid} did not start {n} children")


def _ended(procs: list[psutil.Process]) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in procs):
            return True
        time.sleep(0.01)
    return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_memory_is_summed_over_the_tree_and_kill_ends_every_process_seen() -> None:
    root = subprocess.Popen(["sh", "-c", _ROOT], start_new_session=True, preexec_fn=die_with_parent)
    try:
        kids = _children(root.pid, 2)
        tree = ProcessTree(root.pid)
        assert tree.pgid == root.pid
        total = tree.rss_bytes()  # the first sample discovers the descendants
        assert total > psutil.Process(root.pid).memory_info().rss
        assert {k.pid for k in kids} <= set(tree.seen)
        tree.kill()
        assert root.wait(timeout=5) == -9
        assert _ended(kids)
    finally:
        root.kill()
        root.wait()


def test_a_tree_whose_root_is_gone_weighs_nothing_and_kills_quietly() -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    tree = ProcessTree(done.pid)
    assert tree.seen == {} and tree.rss_bytes() == 0
    tree.kill()  # no such group, no process: nothing raised
