"""``[precision] allow`` as ``init`` drafts it: the baseline's own precision only, and what adding one does.

Whether bf16 is the same task is the user's call (infrarsi/contract/precision.py):
the draft never allows more than the baseline computes in. A job whose dtype
knob defaults to bf16 computes in bf16; a ``--bf16`` switch that is on, likewise;
anything else is float32.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.stages.init.contract_draft import ContractDraft
from infrarsi.contract.precision import DRAFT_NOTE
from infrarsi.dtypes import DTYPE_KNOB_NAMES, TORCH_NAMES, low_precision_in


def baseline_precision(knobs: Mapping[str, Mapping[str, Any]]) -> str:
    """The torch dtype the drafted knobs' defaults compute in (float32 when none says otherwise)."""
    for name, table in knobs.items():
        default = table.get("default")
        if name in DTYPE_KNOB_NAMES and isinstance(default, str):
            spelled = low_precision_in(default)
            named = TORCH_NAMES.get(default.lower()) or (TORCH_NAMES.get(spelled) if spelled else None)
            if named:
                return named
        if isinstance(default, bool) and default and (spelled := low_precision_in(name)):
            return TORCH_NAMES[spelled]
    return "float32"


def draft_precision(draft: ContractDraft) -> None:
    """Write ``precision.allow`` (the baseline's precision) unless the draft already has a policy."""
    if "allow" in (draft.data.get("precision") or {}):
        return
    knobs = draft.data.get("knobs") or {}
    draft.set("precision.allow", [baseline_precision(knobs)], DRAFT_NOTE)
