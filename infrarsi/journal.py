"""The run journal: every trial of every run, in SQLite, written before the next trial starts.

WAL mode and one ``BEGIN IMMEDIATE`` transaction per write, so a bot killed at
any moment leaves a readable journal with every finished trial intact. A trial
is first written as ``running`` (with the bot's pid) and then replaced by its
record; a ``running`` row whose bot is gone reads back as ``interrupted``.
"""

from __future__ import annotations

import contextlib

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from infrarsi.sqlite_wal import open_wal, write_transaction
from infrarsi.seams.proposer import LLMCall
from infrarsi.trial_record import Candidate, Outcome, TrialRecord

JOURNAL_SCHEMA = 2  # 2: llm_calls (added to older journals on open)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    kind TEXT NOT NULL,
    base_commit TEXT,
    info TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS trials (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    trial_no INTEGER NOT NULL,
    candidate_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    bot_pid INTEGER,
    started_at REAL NOT NULL,
    record TEXT,
    PRIMARY KEY (run_id, trial_no)
);
CREATE TABLE IF NOT EXISTS llm_calls (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    created_at REAL NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingTrial:
    """A trial that has started but not been recorded (yet, or ever: its bot may have died)."""

    run_id: str
    trial_no: int
    candidate_hash: str
    bot_pid: int | None
    started_at: float


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Journal:
    """One SQLite file; open it per process (connections are not shared across threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_wal(path)
        with self._write() as db:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            db.execute("INSERT INTO meta(key, value) VALUES ('schema', ?) ON CONFLICT(key) DO UPDATE SET "
                       "value = excluded.value WHERE CAST(meta.value AS INTEGER) < CAST(excluded.value AS INTEGER)",
                       (str(JOURNAL_SCHEMA),))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return write_transaction(self._db)

    def ensure_run(self, run_id: str, *, kind: str, base_commit: str | None = None, info: dict | None = None) -> None:
        with self._write() as db:
            db.execute("INSERT OR IGNORE INTO runs(run_id, created_at, kind, base_commit, info) VALUES (?,?,?,?,?)",
                       (run_id, time.time(), kind, base_commit, json.dumps(info or {}, sort_keys=True)))

    def runs(self) -> list[tuple[str, str, float]]:
        rows = self._db.execute("SELECT run_id, kind, created_at FROM runs ORDER BY created_at").fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def begin_trial(self, run_id: str, candidate: Candidate) -> int:
        """Reserve the next trial number of the run and mark it running; returns the number."""
        with self._write() as db:
            (last,) = db.execute("SELECT COALESCE(MAX(trial_no), 0) FROM trials WHERE run_id = ?", (run_id,)).fetchone()
            trial_no = int(last) + 1
            db.execute("INSERT INTO trials(run_id, trial_no, candidate_hash, status, bot_pid, started_at) "
                       "VALUES (?,?,?,?,?,?)", (run_id, trial_no, candidate.digest(), "running", os.getpid(), time.time()))
        return trial_no

    def record_trial(self, record: TrialRecord) -> None:
        """Write the finished trial (its own transaction; durable before this returns)."""
        payload = json.dumps(record.to_dict(), sort_keys=True)
        with self._write() as db:
            db.execute("INSERT INTO trials(run_id, trial_no, candidate_hash, status, bot_pid, started_at, record) "
                       "VALUES (?,?,?,?,?,?,?) ON CONFLICT(run_id, trial_no) DO UPDATE SET "
                       "status = excluded.status, record = excluded.record",
                       (record.run_id, record.trial_no, record.candidate.digest(), record.outcome.value, os.getpid(),
                        record.started_at, payload))

    def discard_pending(self, run_id: str, trial_no: int) -> None:
        """Forget a reserved trial that never started through no fault of its candidate (e.g. git refused)."""
        with self._write() as db:
            db.execute("DELETE FROM trials WHERE run_id = ? AND trial_no = ? AND record IS NULL", (run_id, trial_no))

    def trials(self, run_id: str | None = None) -> list[TrialRecord]:
        """Recorded trials (in order); pending ones are not records yet, see :meth:`pending`."""
        query = "SELECT record FROM trials WHERE record IS NOT NULL"
        args: tuple = ()
        if run_id is not None:
            query += " AND run_id = ?"
            args = (run_id,)
        rows = self._db.execute(query + " ORDER BY started_at, trial_no", args).fetchall()
        return [TrialRecord.from_dict(json.loads(r[0])) for r in rows]

    def pending(self, run_id: str | None = None) -> list[PendingTrial]:
        query = "SELECT run_id, trial_no, candidate_hash, bot_pid, started_at FROM trials WHERE record IS NULL"
        args: tuple = ()
        if run_id is not None:
            query += " AND run_id = ?"
            args = (run_id,)
        return [PendingTrial(run_id=r[0], trial_no=r[1], candidate_hash=r[2], bot_pid=r[3], started_at=r[4])
                for r in self._db.execute(query + " ORDER BY trial_no", args).fetchall()]

    def orphaned(self, run_id: str | None = None) -> list[PendingTrial]:
        """Pending trials whose bot process is gone: they were interrupted."""
        return [p for p in self.pending(run_id) if p.bot_pid != os.getpid() and not _pid_alive(p.bot_pid)]

    def mark_interrupted(self, pending: PendingTrial, candidate: Candidate, *, cost_s: float) -> TrialRecord:
        """Turn an orphaned pending trial into an ``interrupted`` record with the time it cost."""
        record = TrialRecord(run_id=pending.run_id, trial_no=pending.trial_no, candidate=candidate,
                             outcome=Outcome.INTERRUPTED, reason="the bot stopped while this trial ran",
                             cost_s=cost_s, started_at=pending.started_at, ended_at=pending.started_at + cost_s)
        self.record_trial(record)
        return record

    def record_llm_call(self, run_id: str, call: LLMCall) -> None:
        """One model request of a run (tokens, cost, outcome): LLM cost is part of the run's cost."""
        with self._write() as db:
            (last,) = db.execute("SELECT COALESCE(MAX(seq), 0) FROM llm_calls WHERE run_id = ?", (run_id,)).fetchone()
            db.execute("INSERT INTO llm_calls(run_id, seq, created_at, record) VALUES (?,?,?,?)",
                       (run_id, int(last) + 1, time.time(), json.dumps(call.to_dict(), sort_keys=True)))

    def llm_calls(self, run_id: str | None = None) -> list[LLMCall]:
        query, args = "SELECT record FROM llm_calls", ()
        if run_id is not None:
            query, args = query + " WHERE run_id = ?", (run_id,)
        rows = self._db.execute(query + " ORDER BY run_id, seq", args).fetchall()
        return [LLMCall(**json.loads(r[0])) for r in rows]

    def integrity(self) -> str:
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])
