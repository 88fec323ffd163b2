"""The precision policy (``[precision] allow``): strictly read, one line naming file and key per mistake, and what
it lets a candidate compute in (the policy, the baseline's own, the dtype knobs')."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from infrarsi.contract import ContractError
from infrarsi.contract.model import Knob
from infrarsi.contract.precision import POLICY_DTYPES, PrecisionPolicy
from infrarsi.doctor import allowed_dtypes, policy_lower_dtypes
from tests.support.contracts import write_contract


def test_a_contract_without_the_table_allows_only_the_baseline_and_its_knobs(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    assert contract.precision == PrecisionPolicy()
    assert allowed_dtypes(contract) == ("bfloat16", "float32")  # the dtype knob's values


def test_the_policy_is_read_in_torch_names_and_short_spellings(tmp_path: Path) -> None:
    contract = write_contract(tmp_path, '\n[precision]\nallow = ["fp32", "bfloat16"]\n')
    assert contract.precision.allow == ("float32", "bfloat16")
    assert contract.precision.lower_than("float32") == ("bfloat16",)


@pytest.mark.parametrize(("text", "message"), [
    ('allow = "bfloat16"', "precision.allow: expected an array of dtype names"),
    ("allow = []", "precision.allow: expected at least one dtype"),
    ('allow = ["float32", "int8"]', "precision.allow: 'int8' is not a dtype a matrix product runs in (one of: "
     + ", ".join(POLICY_DTYPES) + ")"),
    ('allow = ["bf16", "bfloat16"]', "precision.allow: 'bfloat16' is listed twice"),
    ('alow = ["float32"]', "precision.alow: unknown key (did you mean 'allow'?)"),
], ids=["not_array", "empty", "unknown", "twice", "typo"])
def test_each_mistake_is_one_line_naming_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ContractError) as info:
        write_contract(tmp_path, f"\n[precision]\n{text}\n")
    line = str(info.value)
    assert "\n" not in line and line.startswith(str(tmp_path / "infrarsi.toml"))
    assert message in line, line


def _contract(*knobs: Knob, allow: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(knobs=knobs, precision=PrecisionPolicy(allow=allow),
                           knob=lambda name: next(k for k in knobs if k.name == name))


def test_allowed_dtypes_are_the_policy_and_what_knobs_offer() -> None:
    dtype = Knob(name="dtype", kind="categorical", values=("fp32", "fp16"), default="fp32", flag="--dtype")
    assert allowed_dtypes(_contract(allow=("float32", "bfloat16"))) == ("bfloat16", "float32")  # type: ignore[arg-type]
    assert allowed_dtypes(_contract(dtype, allow=("bfloat16",))) == ("bfloat16", "float16", "float32")  # type: ignore[arg-type]


def test_the_doctor_calibrates_a_policy_dtype_only_where_no_knob_value_reaches_it() -> None:
    no_flag = _contract(allow=("float32", "bfloat16"))
    assert policy_lower_dtypes(no_flag) == ("bfloat16",)  # type: ignore[arg-type]
    knob = Knob(name="dtype", kind="categorical", values=("fp32", "bf16"), default="fp32", flag="--dtype")
    assert policy_lower_dtypes(_contract(knob, allow=("float32", "bfloat16"))) == ()  # type: ignore[arg-type]
    bf16_baseline = Knob(name="dtype", kind="categorical", values=("bf16",), default="bf16", flag="--dtype")
    assert policy_lower_dtypes(_contract(bf16_baseline, allow=("bfloat16",))) == ()  # type: ignore[arg-type]
