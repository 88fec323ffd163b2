"""The experience bank: what earlier tuning runs found, to seed the next one.

A :class:`Finding` records one candidate's verified effect (or failure) on one
hardware and workload fingerprint. Banks store findings by content id, so
they merge without conflicts; :func:`~infrarsi.bank.similarity.transfer`
turns them into weighted candidates for a new run's first batch. Sharing
between clusters goes through a git branch (``bot.bank.sync``).

Every backend implements :class:`Bank`; ``tests/test_bank_contract.py`` is the
suite each one must pass (only SQLite exists today).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from infrarsi.bank.records import (
    FAILURE_OUTCOMES,
    FINDING_SCHEMA_VERSION,
    HARDWARE_KEYS,
    WORKLOAD_KEYS,
    Effect,
    Finding,
    FindingOutcome,
    FrozenMap,
    Scalar,
    hardware_fingerprint,
    workload_fingerprint,
)
from infrarsi.bank.similarity import (
    OTHER_HARDWARE_DISCOUNT,
    Transfer,
    as_pairs,
    hardware_similarity,
    same_hardware,
    transfer,
    workload_similarity,
)
from infrarsi.bank.store import SqliteBank, default_bank_path, open_bank


@runtime_checkable
class Bank(Protocol):
    """Where findings live. ``add`` is idempotent on the finding's id; ``add_many`` is all-or-none."""

    def add(self, finding: Finding) -> bool:
        """Store one finding; True if it was new."""
        ...

    def add_many(self, findings: Iterable[Finding]) -> int:
        """Store several at once; the number that were new."""
        ...

    def ids(self) -> frozenset[str]:
        """The ids of every stored finding (cheap: what sync compares)."""
        ...

    def findings(self) -> list[Finding]:
        """Every finding, oldest first, upgraded to the current schema."""
        ...

    def similar(self, hardware: Mapping[str, Scalar], workload: Mapping[str, Scalar], top: int = 5) -> list[Transfer]:
        """The best transfers for a new run on (hardware, workload)."""
        ...

    def export_jsonl(self, path: Path | str) -> int:
        """Write every finding to a JSONL file; how many were written."""
        ...

    def import_jsonl(self, path: Path | str) -> int:
        """Read a JSONL file of findings; how many were new."""
        ...

    def close(self) -> None: ...


__all__ = [
    "Bank",
    "Effect",
    "FAILURE_OUTCOMES",
    "FINDING_SCHEMA_VERSION",
    "Finding",
    "FindingOutcome",
    "FrozenMap",
    "HARDWARE_KEYS",
    "OTHER_HARDWARE_DISCOUNT",
    "Scalar",
    "SqliteBank",
    "Transfer",
    "WORKLOAD_KEYS",
    "as_pairs",
    "default_bank_path",
    "hardware_fingerprint",
    "hardware_similarity",
    "open_bank",
    "same_hardware",
    "transfer",
    "workload_fingerprint",
    "workload_similarity",
]
