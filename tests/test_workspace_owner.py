"""The owner record of a trial worktree: written atomically, read back, and alive only while its process is."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import replace
from pathlib import Path

import psutil

from bot.workspace.owner import OWNER_FILE, Owner, read_owner, write_owner


def test_write_then_read_round_trips_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    me = Owner.current(run_id="r1", trial_no=2)
    assert (me.pid, me.host, me.run_id, me.trial_no) == (os.getpid(), socket.gethostname(), "r1", 2)
    write_owner(tmp_path, me)
    assert read_owner(tmp_path) == me
    assert [p.name for p in tmp_path.iterdir()] == [OWNER_FILE]
    assert me.describe() == f"pid {os.getpid()} on {socket.gethostname()}"


def test_an_absent_or_unreadable_record_reads_as_none(tmp_path: Path) -> None:
    assert read_owner(tmp_path) is None
    (tmp_path / OWNER_FILE).write_text("not json")
    assert read_owner(tmp_path) is None
    (tmp_path / OWNER_FILE).write_text(json.dumps({"pid": 1, "host": "h"}))
    assert read_owner(tmp_path) is None


def test_is_alive() -> None:
    me = Owner.current(run_id="r", trial_no=0)
    assert me.is_alive()
    assert not replace(me, started=me.started - 3600).is_alive()  # a recycled pid started at another time
    assert replace(me, host=me.host + "-elsewhere", pid=1).is_alive()  # another host cannot be checked
    unused = max(psutil.pids()) + 10_000
    assert not replace(me, pid=unused).is_alive()
