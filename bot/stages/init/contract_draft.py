"""The contract table being drafted: what init's drafter, its conventions and its step-length reader all write to.

Its own module so that the drafter (``draft.py``) and the parts it calls
(``conventions.py``, ``train_length.py``) import it at module level, none of
them the other's caller (no import cycle: tests/test_layout_rules.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ContractDraft"]


@dataclass(kw_only=True)
class ContractDraft:
    """A contract table being drafted, with a note for every inferred field (dotted key → note)."""

    data: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    # Why tokens_per_step could not be read from the code: init then measures it with one witnessed run
    # (bot/stages/init/measured_tokens.py) before anything is written.
    tokens_unread: str | None = None
    said: list[str] = field(default_factory=list)  # what init prints besides the notes (``init: …`` lines)

    def set(self, dotted: str, value: Any, note: str = "") -> None:
        table = self.data
        *parents, last = dotted.split(".")
        for p in parents:
            table = table.setdefault(p, {})
        table[last] = value
        if note:
            self.notes[dotted] = note
