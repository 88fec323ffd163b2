"""SQLite the way the journal and the bank both need it: WAL, a busy timeout, one immediate transaction per write.

WAL lets readers (a progress display, ``infrarsi journal``) read while a
writer commits; ``BEGIN IMMEDIATE`` takes the write lock up front so two
writers queue instead of failing halfway; a process killed mid-write leaves
the last committed state.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def open_wal(path: Path, *, timeout_s: float = 30.0) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
    return db


@contextmanager
def write_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` … ``COMMIT``; rolled back if the body raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
