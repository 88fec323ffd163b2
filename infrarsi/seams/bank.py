"""The bank seam: where findings of earlier runs live, to seed the next run.

Only SQLite implements it today (:class:`infrarsi.bank.SqliteBank`);
``tests/test_bank_contract.py`` is the suite every backend must pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # infrarsi.bank imports this module; at run time the Protocol needs no annotations
    from infrarsi.bank.records import Finding, Scalar
    from infrarsi.bank.similarity import Transfer

__all__ = ["Bank"]


@runtime_checkable
class Bank(Protocol):
    """Where findings live.

    Call order: open (a backend's constructor or :func:`infrarsi.bank.open_bank`),
    any number of reads and writes, ``close``. Ownership: the caller that opened
    a bank closes it; findings returned are frozen records, upgraded to the
    current schema on read and never rewritten in place. ``add`` is idempotent
    on the finding's content id; ``add_many`` is all-or-none. Thread safety: one
    instance per thread (or process); several instances on one store may write
    at once (SQLite: WAL and one transaction per write). Raises: ``ValueError``
    for a store of a newer schema or a malformed import line (naming the file
    and line); ``OSError`` when the store cannot be read or written.
    """

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
