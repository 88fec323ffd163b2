"""The experience bank on disk: one SQLite file per user, shared by every run on the machine.

Same discipline as the run journal (:mod:`infrarsi.journal`): WAL mode, one
``BEGIN IMMEDIATE`` transaction per write and a long busy timeout, so several
tuning runs can add findings at once and a process killed at any moment leaves
a readable bank with every finding whose :meth:`SqliteBank.add` returned.

Findings are stored as their canonical JSON, keyed by their content id, and
upgraded when read; ``INSERT OR IGNORE`` on the id makes adding idempotent.
"""

from __future__ import annotations

import contextlib

import os
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

import platformdirs

from infrarsi.sqlite_wal import open_wal, write_transaction
from infrarsi.bank.records import Finding, Scalar, normalize_workload
from infrarsi.bank.similarity import MIN_WEIGHT, Transfer, transfer

BANK_SCHEMA = 1
BANK_ENV = "INFRARSI_BANK"
BANK_FILE = "bank.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS findings (
    id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    created_at REAL NOT NULL,
    family TEXT,
    outcome TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS findings_family ON findings(family);
"""


def default_bank_path() -> Path:
    """``$INFRARSI_BANK`` if set, else ``bank.sqlite`` in the user's data directory.

    Per user rather than per repository: what one training repo learnt about a
    GPU is worth knowing to the next repo on the same machine.
    """
    env = os.environ.get(BANK_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("infrarsi")) / BANK_FILE


def open_bank(path: Path | str | None = None) -> SqliteBank:
    """The bank at ``path``, or at :func:`default_bank_path`."""
    return SqliteBank(Path(path) if path is not None else default_bank_path())


class SqliteBank:
    """A :class:`~infrarsi.bank.Bank` in one SQLite file; open one per process (or thread)."""

    def __init__(self, path: Path | str, *, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self._db = open_wal(self.path, timeout_s=timeout_s)
        with self._write() as db:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(BANK_SCHEMA),))
            (stored,) = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if int(stored) > BANK_SCHEMA:
            self._db.close()
            raise ValueError(f"{self.path} is a bank of schema {stored}, newer than this InfraRSI ({BANK_SCHEMA})")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SqliteBank:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteBank({str(self.path)!r})"

    def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return write_transaction(self._db)

    @staticmethod
    def _row(finding: Finding) -> tuple[object, ...]:
        return (finding.id, finding.schema_version, finding.created_at, finding.family, finding.outcome.value,
                finding.to_json())

    def add(self, finding: Finding) -> bool:
        """Store ``finding`` (durable when this returns); False if a finding with its id was there."""
        return self.add_many([finding]) == 1

    def add_many(self, findings: Iterable[Finding]) -> int:
        """Store several findings in one transaction (all or none); returns how many were new."""
        rows = [self._row(f) for f in findings]
        if not rows:
            return 0
        with self._write() as db:
            before = db.total_changes
            db.executemany("INSERT OR IGNORE INTO findings(id, schema_version, created_at, family, outcome, record) "
                           "VALUES (?,?,?,?,?,?)", rows)
            return db.total_changes - before

    def ids(self) -> frozenset[str]:
        return frozenset(r[0] for r in self._db.execute("SELECT id FROM findings"))

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM findings").fetchone()[0])

    def __contains__(self, finding_id: object) -> bool:
        return self._db.execute("SELECT 1 FROM findings WHERE id = ?", (finding_id,)).fetchone() is not None

    def findings(self) -> list[Finding]:
        """Every finding, oldest first (ties by id), upgraded to the current schema."""
        return [Finding.from_json(r[0]) for r in
                self._db.execute("SELECT record FROM findings ORDER BY created_at, id")]

    def similar(self, hardware: Mapping[str, Scalar], workload: Mapping[str, Scalar], top: int = 5, *,
                min_weight: float = MIN_WEIGHT) -> list[Transfer]:
        """The best transfers for (hardware, workload): see :func:`infrarsi.bank.similarity.transfer`."""
        family = normalize_workload(workload).get("family")
        rows = self._db.execute("SELECT record FROM findings WHERE family IS ?", (family,))
        return transfer((Finding.from_json(r[0]) for r in rows), hardware, workload, top=top, min_weight=min_weight)

    def export_jsonl(self, path: Path | str) -> int:
        """Write every finding, one canonical JSON per line, atomically; returns how many."""
        return write_jsonl(self.findings(), path)

    def import_jsonl(self, path: Path | str) -> int:
        """Add the findings of a JSONL file (all or none); returns how many were new here."""
        return self.add_many(read_jsonl(path))

    def integrity(self) -> str:
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])


def write_jsonl(findings: Iterable[Finding], path: Path | str) -> int:
    """One finding per line; written to a temporary file then renamed, so readers never see half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    count = 0
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for finding in findings:
                out.write(finding.to_json() + "\n")
                count += 1
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def read_jsonl(path: Path | str) -> list[Finding]:
    """Parse a whole JSONL file first, so a bad line imports nothing rather than half."""
    out: list[Finding] = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(Finding.from_json(line))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                raise ValueError(f"{path}:{number}: {exc}") from exc
    return out
