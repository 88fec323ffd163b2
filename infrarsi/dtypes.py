"""Everything InfraRSI knows about how a contract names compute dtypes: one table, read by the doctor (the
baseline's dtype, its lower-precision runs), the precision invariant, the report and the device's levers.

Knob *values* are spelled as the user's flag takes them (``bf16``, ``fp32``, ``half``); the witness reports
torch's names (``bfloat16``); switch and patch *names* say a dtype in passing (``--bf16``, ``bf16-mixed``,
``autocast_bf16``).
"""

from __future__ import annotations

import re

#: Knob names that choose the compute dtype by value (the precision invariant reads their values).
DTYPE_KNOB_NAMES = ("dtype", "precision", "amp_dtype", "mixed_precision")

#: A dtype knob's value, as torch spells the dtype.
TORCH_NAMES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
               "fp16": "float16", "float16": "float16", "half": "float16", "fp8": "float8_e4m3fn",
               "fp64": "float64", "float64": "float64"}

#: Low-precision dtypes the doctor probes, as values, switch names and patch ids spell them.
LOW_PRECISION_SPELLINGS: dict[str, str] = {
    "bf16": r"bf16|bfloat16",
    "fp16": r"fp16|float16|half|16(-mixed|-true)?",
}


def torch_name(value: str) -> str | None:
    """The torch dtype a knob value names (``bf16`` → ``bfloat16``); None when it names none."""
    return TORCH_NAMES.get(value.lower())


def low_precision_in(text: str) -> str | None:
    """The low-precision dtype a value or name spells out (``bf16-mixed`` → bf16, ``16`` → fp16)."""
    for dtype, spelling in LOW_PRECISION_SPELLINGS.items():
        if re.fullmatch(rf"(.*[^a-z0-9])?({spelling})([^a-z0-9].*)?", text.lower()):
            return dtype
    return None
