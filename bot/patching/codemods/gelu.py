"""Hand-written GELU formulas → ``F.gelu`` (one fused kernel instead of about eight).

Matches by algebra, not by spelling: the product is flattened and its
constants folded, so ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``,
``x * 0.5 * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))``,
the ``x * (1 + 0.044715 * x * x)`` factoring and ``.tanh()`` all match, and the
erf form ``x * 0.5 * (1 + erf(x / sqrt(2)))`` becomes the exact ``F.gelu(x)``.
The operand must be a plain name (or attribute): the formula evaluates it three
times and ``F.gelu`` once, which is only the same when evaluating it is free.
"""

from __future__ import annotations

import math

import libcst as cst

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

_TANH = {"torch.tanh", "torch.nn.functional.tanh"}
_ERF = {"torch.erf", "torch.special.erf"}
_POW = {"torch.pow"}
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_COEF = 0.044715


class GeluFormulaToFused(PatchCodemod):
    NAME = "fused_gelu"
    NEEDS = ("0.044715", "erf(")
    SUMMARY = 'hand-written tanh/erf GELU formula → F.gelu(x, approximate="tanh") / F.gelu(x)'
    NOT_FOUND = "no hand-written GELU formula (0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))) in the targets"

    def leave_BinaryOperation(self, original_node: cst.BinaryOperation,
                              updated_node: cst.BinaryOperation) -> cst.BaseExpression:
        if not isinstance(original_node.operator, cst.Multiply | cst.Divide):
            return updated_node
        found = self._gelu(original_node)
        if found is None:
            return updated_node
        operand, approximate = found
        if not E.is_pure(operand):
            self.decline(f"GELU formula over `{code_of(operand)}`, which is not a plain name; "
                         "F.gelu would evaluate it once instead of three times")
            return updated_node
        if not self.site_allowed("hand-written GELU"):
            return updated_node
        args = [cst.Arg(E.strip(operand))]
        if approximate:
            args.append(E.kwarg("approximate", cst.SimpleString('"tanh"')))
        self.mark_edited()
        return cst.Call(func=self.ref("torch.nn.functional.gelu"), args=args,
                        lpar=updated_node.lpar, rpar=updated_node.rpar)

    def _gelu(self, node: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
        """(x, approximate) when ``node`` is 0.5 · x · (1 + tanh(...)) or 0.5 · x · (1 + erf(...))."""
        coefficient, rest = E.split_constants(E.product_factors(node))
        if not E.close(coefficient, 0.5, 1e-9) or len(rest) != 2:
            return None
        for x, bracket in ((rest[0], rest[1]), (rest[1], rest[0])):
            inner = self._one_plus(bracket)
            if inner is None:
                continue
            kind, argument = inner
            if kind == "tanh" and self._tanh_argument(argument, x):
                return x, True
            if kind == "erf" and self._erf_argument(argument, x):
                return x, False
        return None

    def _one_plus(self, node: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
        terms = E.sum_terms(node)
        if terms is None:
            return None
        for one, other in ((terms[0], terms[1]), (terms[1], terms[0])):
            if not E.close(E.const_value(one), 1.0, 1e-12) or not isinstance(other, cst.Call):
                continue
            for kind, names in (("tanh", _TANH), ("erf", _ERF)):
                if self.is_call_to(other, names) and len(other.args) == 1:
                    return kind, other.args[0].value
                method = E.method_call(other, kind)
                if method is not None and not method.args and not self.qualnames(method.func) & names:
                    return kind, E.receiver(method)
        return None

    def _tanh_argument(self, node: cst.BaseExpression, x: cst.BaseExpression) -> bool:
        """sqrt(2/pi) · (x + 0.044715 · x³)  or  sqrt(2/pi) · x · (1 + 0.044715 · x²)."""
        coefficient, rest = E.split_constants(E.product_factors(node))
        if not E.close(coefficient, _SQRT_2_OVER_PI, 1e-6):
            return False
        if len(rest) == 1:
            terms = E.sum_terms(rest[0])
            return terms is not None and any(
                E.same(a, x) and self._scaled_power(b, x, 3) for a, b in (terms, terms[::-1]))
        if len(rest) == 2:
            for first, second in ((rest[0], rest[1]), (rest[1], rest[0])):
                terms = E.sum_terms(second)
                if E.same(first, x) and terms is not None and any(
                        E.close(E.const_value(a), 1.0, 1e-12) and self._scaled_power(b, x, 2)
                        for a, b in (terms, terms[::-1])):
                    return True
        return False

    def _scaled_power(self, node: cst.BaseExpression, x: cst.BaseExpression, power: int) -> bool:
        """0.044715 · x^power, with the power written as ``x**p``, ``pow(x, p)`` or repeated factors."""
        coefficient, rest = E.split_constants(E.product_factors(node))
        if not E.close(coefficient, _COEF, 1e-9):
            return False
        exponent = 0
        for factor in rest:
            if E.same(factor, x):
                exponent += 1
                continue
            p = self._power_of(factor, x)
            if p is None:
                return False
            exponent += p
        return exponent == power

    def _power_of(self, node: cst.BaseExpression, x: cst.BaseExpression) -> int | None:
        node = E.strip(node)
        base: cst.BaseExpression | None = None
        exponent: float | None = None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
            base, exponent = node.left, E.const_value(node.right)
        elif isinstance(node, cst.Call) and self.is_call_to(node, _POW) and len(node.args) == 2:
            base, exponent = node.args[0].value, E.const_value(node.args[1].value)
        elif E.method_call(node, "pow") is not None and len(node.args) == 1:  # type: ignore[union-attr]
            base, exponent = E.receiver(node), E.const_value(node.args[0].value)  # type: ignore[arg-type,union-attr]
        if base is None or exponent is None or exponent != int(exponent) or not E.same(base, x):
            return None
        return int(exponent)

    def _erf_argument(self, node: cst.BaseExpression, x: cst.BaseExpression) -> bool:
        """x / sqrt(2), x · (1/sqrt(2)) or x · 0.70710678..."""
        coefficient, rest = E.split_constants(E.product_factors(node))
        return len(rest) == 1 and E.same(rest[0], x) and E.close(coefficient, 1.0 / math.sqrt(2.0), 1e-6)
