"""Everything InfraRSI knows about how a contract names compute dtypes: one table, read by the doctor (the
baseline's dtype, its lower-precision runs), the precision invariant, the report and the device's levers.

Knob *values* are spelled as the user's flag takes them (``bf16``, ``fp32``, ``half``); the witness reports
torch's names (``bfloat16``); switch and patch *names* say a dtype in passing (``--bf16``, ``bf16-mixed``,
``autocast_bf16``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Knob names that choose the compute dtype by value (the precision invariant reads their values).
DTYPE_KNOB_NAMES = ("dtype", "precision", "amp_dtype", "mixed_precision")

#: A dtype knob's value, as torch spells the dtype.
TORCH_NAMES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
               "fp16": "float16", "float16": "float16", "half": "float16", "fp8": "float8_e4m3fn",
               "fp64": "float64", "float64": "float64"}

#: How low a torch dtype's precision is: a step that ran any matrix product lower is judged at the lowest. ``tf32``
#: is not a dtype: float32 products computed in TensorFloat-32 (a float32 math setting, infrarsi.witnessed_settings).
PRECISION_RANK = {"float64": 0, "float32": 1, "tf32": 1.5, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 3,
                  "float8_e5m2": 3}

#: torch's dtype names to the short names device peaks are keyed by (fp8's two formats share one peak).
SHORT_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64",
               "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}

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


def lowest_precision(torch_dtypes: Sequence[str], fallback: str = "float32") -> str:
    """The lowest-precision torch dtype among ``torch_dtypes`` (the first of equals); ``fallback`` when none is
    known."""
    known = [d for d in torch_dtypes if d in PRECISION_RANK]
    return max(known, key=lambda d: PRECISION_RANK[d]) if known else fallback


def short_name(torch_dtype: str) -> str:
    """``bfloat16`` → ``bf16`` (a name without a short one stays as it is)."""
    return SHORT_NAMES.get(torch_dtype, torch_dtype)
