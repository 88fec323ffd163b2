"""infrarsi.contract.knob_domain: a knob's values, the part the contract's Knob and its codec share."""

from __future__ import annotations

import pytest

from infrarsi.contract.knob_codec import KnobCodec, KnobValueError
from infrarsi.contract.knob_domain import DEFAULT_BOOL_TEXT, KnobDomain, same_value
from infrarsi.contract.model import Knob


def test_a_domain_holds_its_values_and_says_them() -> None:
    listed = KnobDomain(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"))
    ranged = KnobDomain(name="lr", kind="float", default=1e-3, low=1e-4, high=1e-2, log=True)
    flag = KnobDomain(name="compile", kind="bool", default=False)
    assert listed.contains("bf16") and not listed.contains("fp16")
    assert ranged.contains(5e-3) and not ranged.contains(1.0) and not ranged.contains(True)
    assert flag.contains(True) and not flag.contains(1) and flag.bool_text == DEFAULT_BOOL_TEXT
    assert listed.domain_text() == "one of 'fp32', 'bf16'" and flag.domain_text() == "true or false"
    assert ranged.domain_text() == "a number in [0.0001, 0.01]"


def test_true_is_not_one() -> None:
    assert same_value(1, 1) and same_value(True, True) and not same_value(True, 1) and not same_value(0, False)


def test_a_knob_is_its_domain_and_its_codec_reads_either() -> None:
    knob = Knob(name="micro", kind="int", default=1, values=(1, 2, 4), flag="--micro")
    assert isinstance(knob, KnobDomain) and knob.codec == KnobCodec(knob)
    assert knob.codec.from_cli("4") == 4
    with pytest.raises(KnobValueError, match="knob micro: expected one of 1, 2, 4, got '3'"):
        KnobCodec(KnobDomain(name="micro", kind="int", default=1, values=(1, 2, 4))).from_cli("3")
