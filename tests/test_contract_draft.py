"""bot.stages.init.contract_draft: the contract table being drafted, each inferred field with its note."""

from __future__ import annotations

from bot.stages.init.contract_draft import ContractDraft
from bot.stages.init.draft import ContractDraft as FromTheDrafter


def test_a_dotted_key_makes_its_tables_and_keeps_its_note() -> None:
    draft = ContractDraft()
    draft.set("timing.warmup_steps", 2, "guessed: the first 2 step lines")
    draft.set("timing.measured_steps", 6)
    assert draft.data == {"timing": {"warmup_steps": 2, "measured_steps": 6}}
    assert draft.notes == {"timing.warmup_steps": "guessed: the first 2 step lines"}
    assert draft.tokens_unread is None


def test_the_drafter_hands_out_the_same_record() -> None:
    assert FromTheDrafter is ContractDraft
