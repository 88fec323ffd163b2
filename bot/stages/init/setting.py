"""A launch setting as a training script defines it, and the literal values ``init`` reads statically.

Shared by every reader of a convention (:mod:`bot.stages.init.discover`, :mod:`bot.stages.init.cfgnode`):
the user's code is never imported, only its literals evaluated.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from typing import Any, Literal

import libcst as cst

from infrarsi.contract.knob_codec import INFINITY, python_literal

Passing = Literal["flag-space", "flag-equals", "switch", "hydra", "env", "code"]
# flag-space: ``--name VALUE`` (two arguments); flag-equals: ``--name=VALUE`` (one; nanoGPT's configurator);
# switch: a bare ``--name`` for true; hydra: ``a.b=VALUE``; env: an environment variable; code: a literal in
# the code (a patch could change it, no launch argument can).


@dataclass(frozen=True, kw_only=True, slots=True)
class Setting:
    """One launch setting as the code defines it."""

    key: str  # as the code names it: dest, field, global, dotted Hydra key, env var
    convention: str  # argparse | hf | globals | hydra | lightning | lightning-cli | click | typer | fire | cfgnode | env
    passing: Passing
    token: str  # what goes on the command line (``--bf16``, ``trainer.precision``) or the variable name
    default: Any = None
    has_default: bool = False
    type: str | None = None
    choices: tuple[Any, ...] | None = None
    line: int = 0
    help: str = ""

    @property
    def leaf(self) -> str:
        """The last component, normalised: what the classifier reads."""
        return re.split(r"[.]", self.key)[-1].lower().replace("-", "_")


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.truediv, ast.Pow: operator.pow}


def _arith(node: ast.AST) -> Any:
    """Constant arithmetic (``5 * 8``, ``2**10``, ``1024 * 12``): what config globals often hold."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arith(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Pow) and abs(b) > 64:
            raise ValueError("too large")
        return _OPS[type(node.op)](a, b)
    raise ValueError("not constant arithmetic")


def literal(node: cst.BaseExpression | None) -> tuple[bool, Any]:
    if node is None:
        return False, None
    code = cst.Module(body=[]).code_for_node(node)
    if INFINITY.match(code):
        return python_literal(code)
    try:
        return True, ast.literal_eval(code)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return True, _arith(ast.parse(code.strip(), mode="eval").body)
    except (ValueError, SyntaxError, TypeError, ZeroDivisionError, RecursionError, OverflowError):
        return False, None


def code_text(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def type_of(value: Any) -> str | None:
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value))
