"""The table of what a speed patch never needs: every entry has its reason, and docs/trials.md shows each class."""

from __future__ import annotations

from pathlib import Path

from bot.patching.suspicious_table import RULES, WHY

ROOT = Path(__file__).resolve().parents[1]


def test_every_rule_has_a_reason_and_a_reason_never_splits_a_list_of_findings() -> None:
    assert set(RULES.values()) <= set(WHY) and set(WHY) >= {"import", "code", "write", "fd", "records"}
    assert not any(";" in why for why in WHY.values())  # a quarantine reason separates its findings with "; "


def test_the_page_on_trials_has_a_row_for_every_class_with_its_reason() -> None:
    page = (ROOT / "docs" / "trials.md").read_text(encoding="utf-8")
    section = page[page.index("### The quarantine"):page.index("### The red team")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| class")]
    assert len(rows) == len(WHY), rows
    assert all(any(line.endswith(f"| {why} |") for line in rows) for why in WHY.values())
