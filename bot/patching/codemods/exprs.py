"""Small, pure helpers for reading and building libcst expressions.

Pattern matching in the codemods compares expressions by meaning, not by
spelling: ``key`` normalises through :mod:`ast` so that ``(q)`` and ``q`` or
``k.transpose(-2,-1)`` and ``k.transpose(-2, -1)`` are the same. Constants are
folded (``math.sqrt(2.0 / math.pi)``) so the GELU and attention matchers can
accept the many ways the same number is written.
"""

from __future__ import annotations

import ast
import math
from typing import Iterator, Sequence

import libcst as cst

from bot.patching.symbols import code_of


def strip(node: cst.BaseExpression) -> cst.BaseExpression:
    """The expression without its own parentheses."""
    if getattr(node, "lpar", None) or getattr(node, "rpar", None):
        try:
            return node.with_changes(lpar=(), rpar=())
        except cst.CSTValidationError:  # `()` needs its parentheses
            return node
    return node


def key(node: cst.CSTNode) -> str:
    """A spelling-independent identity for an expression (its ``ast.dump``)."""
    text = code_of(node).strip()
    try:
        return ast.dump(ast.parse(text, mode="eval").body)
    except SyntaxError:  # pragma: no cover - libcst printed something ast rejects
        return text


def same(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return key(a) == key(b)


def names_in(node: cst.CSTNode) -> set[str]:
    """Every bare name read or written anywhere under ``node``."""
    found: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)  # the attribute name itself is not a variable
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)  # neither is a keyword
            return False

    node.visit(_Names())
    return found


def count_name(node: cst.CSTNode, name: str) -> int:
    """How many times the variable ``name`` occurs under ``node``."""
    count = 0

    class _Count(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            nonlocal count
            count += n.value == name

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)
            return False

    node.visit(_Count())
    return count


def is_pure(node: cst.BaseExpression) -> bool:
    """A name or a chain of attributes on a name: safe to evaluate once instead of many times."""
    node = strip(node)
    if isinstance(node, cst.Name):
        return True
    if isinstance(node, cst.Attribute):
        return is_pure(node.value)
    return False


def method_call(node: cst.CSTNode, *names: str) -> cst.Call | None:
    """``node`` if it is ``<receiver>.<name>(...)`` for one of ``names``."""
    node = strip(node) if isinstance(node, cst.BaseExpression) else node
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in names):
        return node
    return None


def receiver(call: cst.Call) -> cst.BaseExpression:
    """The object a method is called on."""
    assert isinstance(call.func, cst.Attribute)
    return call.func.value


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a
    return None


def argument(call: cst.Call, index: int, name: str) -> cst.BaseExpression | None:
    """The argument given by position ``index`` or by keyword ``name``."""
    kw = keyword(call, name)
    if kw is not None:
        return kw.value
    pos = positional(call)
    return pos[index].value if index < len(pos) else None


def has_star(call: cst.Call) -> bool:
    return any(a.star for a in call.args)


def literal_bool(node: cst.BaseExpression | None) -> bool | None:
    node = strip(node) if node is not None else None
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def literal_int(node: cst.BaseExpression | None) -> int | None:
    node = strip(node) if node is not None else None
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_int(node.expression)
        return -inner if inner is not None else None
    return None


_CONSTANTS = {"math.pi": math.pi, "math.e": math.e, "math.inf": math.inf, "torch.pi": math.pi,
              "np.pi": math.pi, "numpy.pi": math.pi, "torch.inf": math.inf, "np.inf": math.inf}
_FUNCTIONS = {"math.sqrt": math.sqrt, "np.sqrt": math.sqrt, "numpy.sqrt": math.sqrt}


def const_value(node: cst.BaseExpression | None) -> float | None:
    """The number an expression of literals always evaluates to, or None.

    Understands ``math.pi``, ``math.sqrt``, ``float('-inf')``, arithmetic and ``**``.
    """
    if node is None:
        return None
    node = strip(node)
    if isinstance(node, cst.Integer | cst.Float):
        return float(node.evaluated_value)
    if isinstance(node, cst.Attribute):
        return _CONSTANTS.get(code_of(node))
    if isinstance(node, cst.UnaryOperation):
        inner = const_value(node.expression)
        if inner is None:
            return None
        if isinstance(node.operator, cst.Minus):
            return -inner
        return inner if isinstance(node.operator, cst.Plus) else None
    if isinstance(node, cst.BinaryOperation):
        left, right = const_value(node.left), const_value(node.right)
        if left is None or right is None:
            return None
        op = node.operator
        try:
            if isinstance(op, cst.Add):
                return left + right
            if isinstance(op, cst.Subtract):
                return left - right
            if isinstance(op, cst.Multiply):
                return left * right
            if isinstance(op, cst.Divide):
                return left / right
            if isinstance(op, cst.Power):
                return float(left**right)
        except (ZeroDivisionError, OverflowError, ValueError):
            return None
        return None
    if isinstance(node, cst.Call) and len(node.args) == 1 and not node.args[0].keyword:
        fn = code_of(node.func)
        if fn == "float":
            value = strip(node.args[0].value)
            if isinstance(value, cst.SimpleString):
                try:
                    return float(value.evaluated_value)
                except (ValueError, TypeError):
                    return None
            return const_value(value)
        arg = const_value(node.args[0].value)
        if fn in _FUNCTIONS and arg is not None and arg >= 0:
            return _FUNCTIONS[fn](arg)
    return None


def close(value: float | None, target: float, rel: float = 1e-6) -> bool:
    return value is not None and math.isclose(value, target, rel_tol=rel)


def product_factors(node: cst.BaseExpression) -> list[cst.BaseExpression | float]:
    """The factors of a product, parentheses dropped; division by a constant becomes
    its reciprocal (``x * (1 + t) / 2`` → ``[x, (1 + t), 0.5]``)."""
    node = strip(node)
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Multiply):
            return product_factors(node.left) + product_factors(node.right)
        if isinstance(node.operator, cst.Divide):
            divisor = const_value(node.right)
            if divisor not in (None, 0.0):
                return product_factors(node.left) + [1.0 / divisor]  # type: ignore[operator]
    value = const_value(node)
    return [value] if value is not None else [node]


def split_constants(factors: Sequence[cst.BaseExpression | float]) -> tuple[float, list[cst.BaseExpression]]:
    """(product of the constant factors, the other factors)."""
    coefficient = 1.0
    rest: list[cst.BaseExpression] = []
    for f in factors:
        if isinstance(f, float):
            coefficient *= f
        else:
            rest.append(f)
    return coefficient, rest


def sum_terms(node: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The two terms of ``a + b`` (parentheses dropped), or None."""
    node = strip(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return [strip(node.left), strip(node.right)]
    return None


def statements_in(node: cst.CSTNode) -> Iterator[cst.BaseSmallStatement]:
    """Every small statement under ``node`` (assignments, expressions, returns...)."""
    found: list[cst.BaseSmallStatement] = []

    class _Stmts(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if isinstance(n, cst.BaseSmallStatement):
                found.append(n)
            return True

    node.visit(_Stmts())
    return iter(found)


def assigned_names(node: cst.CSTNode) -> set[str]:
    """Names bound under ``node`` by assignment, augmented assignment, ``for`` or ``with ... as``."""
    out: set[str] = set()

    class _Targets(cst.CSTVisitor):
        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            out.update(_target_names(n.target))

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            out.update(_target_names(n.target))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            if n.value is not None:
                out.update(_target_names(n.target))

        def visit_For(self, n: cst.For) -> None:
            out.update(_target_names(n.target))

        def visit_AsName(self, n: cst.AsName) -> None:
            out.update(_target_names(n.name))

        def visit_NamedExpr(self, n: cst.NamedExpr) -> None:
            out.update(_target_names(n.target))

    node.visit(_Targets())
    return out


def _target_names(target: cst.CSTNode) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, cst.Tuple | cst.List):
        names: set[str] = set()
        for element in target.elements:
            names |= _target_names(element.value)
        return names
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return set()


def simple_assign(statement: cst.BaseStatement) -> tuple[cst.BaseAssignTargetExpression, cst.BaseExpression] | None:
    """``(target, value)`` for a line that is exactly one single-target assignment."""
    if (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1):
        assign = statement.body[0]
        return assign.targets[0].target, assign.value
    return None


def name_assign(statement: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    """``(name, value)`` for a line that is exactly ``name = value``."""
    found = simple_assign(statement)
    if found is not None and isinstance(found[0], cst.Name):
        return found[0].value, found[1]
    return None


def kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value`` spelled the PEP 8 way (no spaces around ``=``)."""
    return cst.Arg(keyword=cst.Name(name), value=value,
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def insert_arg(call: cst.Call, new: cst.Arg) -> cst.Call:
    """``call`` with ``new`` added after its last keyword (before any ``**mapping``),
    keeping the call's layout: a one-line call stays on one line, a call with one
    argument per line gets one more line, a trailing comma stays trailing."""
    args = list(call.args)
    index = next((i for i, a in enumerate(args) if a.star == "**"), len(args))
    if index == len(args) and args:
        last = args[-1]
        separator = _separator(call, args)
        new = new.with_changes(comma=last.comma)
        args[-1] = last.with_changes(comma=separator)
        args.append(new)
    else:
        separator = args[index - 1].comma if index else cst.MaybeSentinel.DEFAULT
        args.insert(index, new.with_changes(comma=separator))
    return call.with_changes(args=args)


def _separator(call: cst.Call, args: Sequence[cst.Arg]) -> cst.Comma | cst.MaybeSentinel:
    """The comma that separates two arguments in this call's layout."""
    if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        comma = args[-2].comma
        after = comma.whitespace_after
        if isinstance(after, cst.ParenthesizedWhitespace) and after.first_line.comment is not None:
            # Borrow the layout, not the comment that ends that argument's line.
            comma = comma.with_changes(whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace()))
        return comma
    if isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        return cst.Comma(whitespace_after=call.whitespace_before_args)
    return cst.MaybeSentinel.DEFAULT


def set_arg_value(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with the keyword argument ``name`` given ``value`` (layout kept)."""
    args = [a.with_changes(value=value) if a.keyword is not None and a.keyword.value == name else a
            for a in call.args]
    return call.with_changes(args=args)


def expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)
