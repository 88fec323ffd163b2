"""Strict TOML tables: each accessor checks its type and names the full dotted key; unknown keys are refused."""

from __future__ import annotations

import pytest

from infrarsi.contract.errors import ContractError
from infrarsi.contract.strict_toml import Table, describe


def test_describe_names_the_toml_type() -> None:
    assert describe(True) == "boolean True" and describe(3) == "integer 3" and describe(1.5) == "float 1.5"
    assert describe("x") == "string 'x'" and describe([1]) == "array" and describe({}) == "table"


def _message(call) -> str:
    with pytest.raises(ContractError) as info:
        call()
    return str(info.value)


def test_accessors_check_types_and_name_the_dotted_key() -> None:
    t = Table({"n": 3, "f": 2, "b": True, "s": "a", "l": ["x", "y"], "sub": {"k": 1}}, file="c.toml", key="top")
    assert (t.integer("n", minimum=1), t.number("f"), t.boolean("b"), t.string("s"), t.strings("l")) == \
        (3, 2.0, True, "a", ("x", "y"))
    assert isinstance(t.number("f"), float)
    assert t.table("sub").integer("k") == 1
    assert t.integer("absent", 7) == 7 and t.string("absent2", None) is None and t.strings("absent3", ()) == ()
    assert _message(lambda: t.integer("b")) == "c.toml: top.b: expected an integer, got boolean True"
    assert _message(lambda: t.integer("n", minimum=4)) == "c.toml: top.n: expected an integer >= 4, got integer 3"
    assert _message(lambda: t.number("b")) == "c.toml: top.b: expected a positive number, got boolean True"
    assert _message(lambda: t.string("s", choices=("p", "q"))) == \
        "c.toml: top.s: expected one of 'p', 'q', got string 'a'"
    assert _message(lambda: t.strings("sub")) == "c.toml: top.sub: expected an array of strings, got table"
    assert _message(lambda: t.boolean("n")) == "c.toml: top.n: expected true or false, got integer 3"
    assert _message(lambda: t.integer("gone")) == "c.toml: top.gone: missing; expected an integer"
    assert _message(lambda: t.table("n")) == "c.toml: top.n: expected a table, got integer 3"
    assert _message(lambda: t.table("none", required=True)) == "c.toml: top.none: missing; expected a table"


def test_a_number_may_be_zero_or_negative_when_not_positive_only_and_strings_must_not_be_blank() -> None:
    t = Table({"z": 0, "blank": "  "}, file="f", key="")
    assert t.number("z", positive=False) == 0.0
    assert _message(lambda: t.number("z")) == "f: z: expected a positive number, got integer 0"
    assert _message(lambda: t.string("blank")) == "f: blank: expected a non-empty string"


def test_finish_refuses_unknown_keys_with_the_closest_known_one() -> None:
    t = Table({"budget": 1, "verfy": 2}, file="f.toml", key="")
    t.integer("budget")
    t.has("verify")
    t.raw("verify", None)
    assert _message(t.finish) == "f.toml: verfy: unknown key (did you mean 'verify'?); known keys here: budget, verify"
    ok = Table({"a": 1}, file="f", key="x")
    ok.integer("a")
    ok.finish()
    assert _message(lambda: Table([], file="f", key="x")) == "f: x: expected a table, got array"
