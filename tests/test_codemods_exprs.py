"""Small pure helpers for reading and building libcst expressions: identity by meaning, constant folding,
argument access and layout-keeping edits."""

from __future__ import annotations

import math

import libcst as cst
import pytest

from bot.patching.codemods.exprs import (argument, assigned_names, close, const_value, count_name, expr, has_star,
                                         insert_arg, is_pure, key, keyword, kwarg, literal_bool, literal_int,
                                         method_call, name_assign, names_in, positional, product_factors, receiver,
                                         same, set_arg_value, simple_assign, split_constants, statements_in, strip,
                                         sum_terms)
from bot.patching.symbols import code_of


def _call(code: str) -> cst.Call:
    node = expr(code)
    assert isinstance(node, cst.Call)
    return node


def test_expressions_are_the_same_whatever_their_spelling() -> None:
    assert same(expr("(q)"), expr("q")) and same(expr("k.transpose(-2,-1)"), expr("k.transpose( -2, -1 )"))
    assert not same(expr("a + b"), expr("b + a"))
    assert key(expr("x")) == key(expr("(x)"))
    assert code_of(strip(expr("((a + b))"))) == "a + b" and code_of(strip(expr("()"))) == "()"


def test_names_are_the_variables_not_attributes_or_keywords() -> None:
    node = expr("f(x.weight, scale=y) + x")
    assert names_in(node) == {"f", "x", "y"}
    assert count_name(node, "x") == 2 and count_name(node, "weight") == 0


@pytest.mark.parametrize("code, value", [
    ("2", 2.0), ("-0.5", -0.5), ("math.sqrt(2.0 / math.pi)", math.sqrt(2 / math.pi)), ("1 / 2 ** 0.5", 2 ** -0.5),
    ("torch.pi", math.pi), ("x", None), ("1 / 0", None), ("np.sqrt(x)", None)])
def test_constants_are_folded(code: str, value: float | None) -> None:
    got = const_value(expr(code))
    assert got == value if value is None else close(got, value)


def test_close_is_relative_and_none_is_never_close() -> None:
    assert close(1.0 + 1e-9, 1.0) and not close(1.01, 1.0) and not close(None, 1.0)
    assert close(1.01, 1.0, rel=0.02)


def test_products_and_sums_are_split_into_their_parts() -> None:
    factors = product_factors(expr("x * (1 + t) / 2"))
    assert [f if isinstance(f, float) else code_of(f) for f in factors] == ["x", "1 + t", 0.5]
    scale, rest = split_constants([0.5, expr("x"), 4.0])
    assert scale == 2.0 and [code_of(r) for r in rest] == ["x"]
    terms = sum_terms(expr("(a) + b * c"))
    assert terms is not None and [code_of(t) for t in terms] == ["a", "b * c"]
    assert sum_terms(expr("a - b")) is None


def test_literals_and_purity() -> None:
    assert (literal_bool(expr("True")), literal_bool(expr("False")), literal_bool(expr("x")), literal_bool(None)) == (
        True, False, None, None)
    assert (literal_int(expr("3")), literal_int(expr("-2")), literal_int(expr("1.5"))) == (3, -2, None)
    assert is_pure(expr("self.attn.bias")) and not is_pure(expr("f(x)")) and not is_pure(expr("x[0]"))


def test_call_arguments_by_position_or_keyword() -> None:
    call = _call("opt.AdamW(params, 1e-3, betas=(0.9, 0.95))")
    assert method_call(call, "AdamW", "SGD") is call and method_call(call, "SGD") is None
    assert code_of(receiver(call)) == "opt"
    assert [code_of(a.value) for a in positional(call)] == ["params", "1e-3"]
    assert code_of(argument(call, 1, "lr")) == "1e-3" and argument(call, 5, "eps") is None
    assert keyword(call, "betas") is not None and keyword(call, "lr") is None
    assert not has_star(call) and has_star(_call("f(*a)")) and has_star(_call("f(**kw)"))


def test_arguments_are_added_and_set_keeping_the_layout() -> None:
    assert code_of(insert_arg(_call("f(a, b=1)"), kwarg("c", expr("2")))) == "f(a, b=1, c=2)"
    assert code_of(insert_arg(_call("f(a, **kw)"), kwarg("c", expr("2")))) == "f(a, c=2, **kw)"
    assert code_of(insert_arg(_call("f()"), kwarg("c", expr("2")))) == "f(c=2)"
    tall = "f(\n    a,\n    b=1,\n)"
    assert code_of(insert_arg(_call(tall), kwarg("c", expr("2")))) == "f(\n    a,\n    b=1,\n    c=2,\n)"
    assert code_of(set_arg_value(_call("f(a, foreach=False)"), "foreach", expr("True"))) == "f(a, foreach=True)"


def test_statements_and_the_names_they_assign() -> None:
    body = cst.parse_module("x = 1\na, b = f()\ny += 2\nfor i in r:\n    z: int = 3\nwith o as w:\n    pass\n")
    assert {"x", "a", "b", "y", "i", "z", "w"} <= assigned_names(body)
    assert [type(s).__name__ for s in statements_in(body)] == ["Assign", "Assign", "AugAssign", "AnnAssign",
                                                               "Pass"]
    one = cst.parse_statement("x = y + 1\n")
    target_value = simple_assign(one)
    assert target_value is not None and code_of(target_value[1]) == "y + 1"
    named = name_assign(one)
    assert named is not None and named[0] == "x"
    assert name_assign(cst.parse_statement("self.x = 1\n")) is None
    assert simple_assign(cst.parse_statement("a = b = 1\n")) is None
