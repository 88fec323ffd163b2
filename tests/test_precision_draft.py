"""``init`` drafts ``[precision] allow`` with the baseline's own precision only, and says what adding one does."""

from __future__ import annotations

import pytest

from bot.stages.init.contract_draft import ContractDraft
from bot.stages.init.precision_draft import baseline_precision, draft_precision


@pytest.mark.parametrize(("knobs", "expected"), [
    ({}, "float32"),
    ({"micro_batch": {"default": 2}}, "float32"),
    ({"dtype": {"default": "fp32", "values": ["fp32", "bf16"]}}, "float32"),
    ({"dtype": {"default": "bf16"}}, "bfloat16"),
    ({"precision": {"default": "bf16-mixed"}}, "bfloat16"),
    ({"bf16": {"default": True, "kind": "bool"}}, "bfloat16"),
    ({"bf16": {"default": False, "kind": "bool"}}, "float32"),
], ids=["none", "no-dtype", "fp32-knob", "bf16-knob", "lightning", "hf-switch-on", "hf-switch-off"])
def test_the_baseline_precision_is_what_the_knobs_defaults_compute_in(knobs: dict, expected: str) -> None:
    assert baseline_precision(knobs) == expected


def test_the_draft_allows_the_baseline_only_and_says_what_adding_one_does() -> None:
    draft = ContractDraft(data={"knobs": {"micro_batch": {"default": 2}}})
    draft_precision(draft)
    assert draft.data["precision"] == {"allow": ["float32"]}
    note = draft.notes["precision.allow"]
    assert '"bfloat16"' in note and "natively" in note and "pull request" in note


def test_a_policy_already_drafted_is_kept() -> None:
    draft = ContractDraft(data={"precision": {"allow": ["float32", "bfloat16"]}})
    draft_precision(draft)
    assert draft.data["precision"]["allow"] == ["float32", "bfloat16"]
