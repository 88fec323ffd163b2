"""The experience bank: what earlier tuning runs found, to seed the next one.

A :class:`Finding` records one candidate's verified effect (or failure) on one
hardware and workload fingerprint. Banks store findings by content id, so
they merge without conflicts; :func:`~infrarsi.bank.similarity.transfer`
turns them into weighted candidates for a new run's first batch. Sharing
between clusters goes through a git branch (``bot.bank.sync``).

Every backend implements :class:`infrarsi.seams.bank.Bank` (re-exported here);
``tests/test_bank_contract.py`` is the suite each one must pass (only SQLite
exists today).
"""

from __future__ import annotations

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
from infrarsi.seams.bank import Bank  # the Protocol lives with the other seams; re-exported here


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
