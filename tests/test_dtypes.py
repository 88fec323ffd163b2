"""How a contract names compute dtypes: torch's names for knob values, low precision spelled in passing."""

from __future__ import annotations

import pytest

from infrarsi.dtypes import DTYPE_KNOB_NAMES, torch_name, low_precision_in


@pytest.mark.parametrize(("value", "torch"), [("bf16", "bfloat16"), ("BF16", "bfloat16"), ("half", "float16"),
                                               ("fp32", "float32"), ("float64", "float64"), ("fp8", "float8_e4m3fn"),
                                               ("int8", None), ("", None)])
def test_torch_name(value: str, torch: str | None) -> None:
    assert torch_name(value) == torch


@pytest.mark.parametrize(("text", "dtype"), [
    ("bf16", "bf16"), ("--bf16", "bf16"), ("bf16-mixed", "bf16"), ("autocast_bf16", "bf16"), ("BFloat16", "bf16"),
    ("fp16", "fp16"), ("half", "fp16"), ("16", "fp16"), ("16-mixed", "fp16"), ("16-true", "fp16"),
    ("fp32", None), ("32", None), ("bf16x", None), ("160", None), ("fp16ish", None), ("", None),
])
def test_low_precision_in_matches_whole_words_only(text: str, dtype: str | None) -> None:
    assert low_precision_in(text) == dtype


def test_dtype_knob_names_are_the_ones_the_precision_invariant_reads() -> None:
    assert "dtype" in DTYPE_KNOB_NAMES and "precision" in DTYPE_KNOB_NAMES and "micro" not in DTYPE_KNOB_NAMES
