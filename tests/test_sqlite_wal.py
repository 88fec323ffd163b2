"""SQLite in WAL mode with one immediate transaction per write, rolled back when the body raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.sqlite_wal import open_wal, write_transaction


def test_open_wal_creates_the_directory_and_sets_wal_and_the_busy_timeout(tmp_path: Path) -> None:
    db = open_wal(tmp_path / "a" / "b" / "j.sqlite", timeout_s=2.5)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 2500
    assert db.isolation_level is None
    db.close()


def test_a_write_commits_and_another_connection_sees_it(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    db = open_wal(path)
    with write_transaction(db) as tx:
        tx.execute("CREATE TABLE t (x INTEGER)")
        tx.execute("INSERT INTO t VALUES (1)")
    assert open_wal(path).execute("SELECT x FROM t").fetchall() == [(1,)]


def test_a_body_that_raises_is_rolled_back_and_the_error_propagates(tmp_path: Path) -> None:
    db = open_wal(tmp_path / "j.sqlite")
    with write_transaction(db):
        db.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(RuntimeError, match="boom"):
        with write_transaction(db):
            db.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("boom")
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    assert not db.in_transaction
