"""bot.stages.init.setting: literals are read statically (constant arithmetic, infinities), never evaluated."""
from __future__ import annotations

import math

import libcst as cst
import pytest

from bot.stages.init.setting import Setting, code_text, literal, type_of


def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


@pytest.mark.parametrize(("code", "value"), [
    ("3e-4", 3e-4), ("'bf16'", "bf16"), ("True", True), ("None", None), ("[1, 2]", [1, 2]),
    ("5 * 8", 40), ("2**10", 1024), ("1024 * 12", 12288), ("-3", -3), ("-(2 * 4)", -8), ("7 // 2", 3),
])
def test_literals_and_constant_arithmetic_are_read(code: str, value: object) -> None:
    assert literal(_expr(code)) == (True, value)


@pytest.mark.parametrize("code", ["os.cpu_count()", "n_layer * 2", "1 / 0", "2 ** 100", "f(3)", "x"])
def test_what_is_not_a_constant_is_not_read(code: str) -> None:
    assert literal(_expr(code)) == (False, None)


def test_a_missing_node_is_not_read() -> None:
    assert literal(None) == (False, None)


def test_an_infinite_default_is_read_as_infinity() -> None:
    ok, value = literal(_expr("float('inf')"))
    assert ok and value == math.inf


def test_code_text_is_the_source_of_the_node() -> None:
    assert code_text(_expr("a.b(c=1)")) == "a.b(c=1)"


@pytest.mark.parametrize(("value", "kind"), [(True, "bool"), (3, "int"), (0.5, "float"), ("x", "str"),
                                             (None, None), ([1], None)])
def test_type_of_names_only_the_scalar_types(value: object, kind: str | None) -> None:
    assert type_of(value) == kind


@pytest.mark.parametrize(("key", "leaf"), [("trainer.precision", "precision"), ("Batch-Size", "batch_size"),
                                           ("lr", "lr")])
def test_the_leaf_is_the_last_component_normalised(key: str, leaf: str) -> None:
    s = Setting(key=key, convention="hydra", passing="hydra", token=key)
    assert s.leaf == leaf
