"""How a file can refer to ``torch.nn.functional.gelu`` with the imports it already has.

A codemod should write ``F.gelu`` in a file that did ``import torch.nn.functional
as F`` and ``torch.nn.functional.gelu`` in one that only did ``import torch``:
adding an import is a module-level change that the contract may forbid, so it
is the last resort, and it is reported when it happens.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from bot.patching.symbols import code_of

Bindings = dict[str, str]  # local name -> dotted thing it refers to


def module_bindings(module: cst.Module) -> Bindings:
    """Names bound by the module's top-level imports (also inside top-level ``if``/``try``,
    but not under ``if TYPE_CHECKING:``, which does not run)."""
    bindings: Bindings = {}
    _collect(module.body, bindings)
    return bindings


def _collect(body: object, bindings: Bindings) -> None:
    for statement in body:  # type: ignore[attr-defined]
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                _bind(small, bindings)
        elif isinstance(statement, cst.If):
            if "TYPE_CHECKING" not in code_of(statement.test):
                _collect(statement.body.body, bindings)
                if statement.orelse is not None:
                    _collect(statement.orelse.body.body, bindings)  # type: ignore[union-attr]
        elif isinstance(statement, cst.Try):
            _collect(statement.body.body, bindings)


def _bind(small: cst.BaseSmallStatement, bindings: Bindings) -> None:
    if isinstance(small, cst.Import):
        for alias in small.names:
            dotted = code_of(alias.name)
            if alias.asname is not None:
                bindings[code_of(alias.asname.name)] = dotted
            else:
                top = dotted.split(".")[0]
                bindings[top] = top
    elif isinstance(small, cst.ImportFrom):
        if small.relative or small.module is None or isinstance(small.names, cst.ImportStar):
            return
        module = code_of(small.module)
        for alias in small.names:
            name = code_of(alias.name)
            local = code_of(alias.asname.name) if alias.asname is not None else name
            bindings[local] = f"{module}.{name}"


def reference(bindings: Bindings, target: str) -> str | None:
    """The shortest spelling of dotted ``target`` through an existing binding, or None.

    The most specific binding wins (``F`` for ``torch.nn.functional`` beats ``torch``);
    ties go to the alphabetically first local name so the output is deterministic.
    """
    best: tuple[int, str, str] | None = None
    for local, bound in bindings.items():
        if target == bound or target.startswith(bound + "."):
            candidate = (-len(bound), local, local + target[len(bound):])
            if best is None or candidate < best:
                best = candidate
    return best[2] if best is not None else None


@dataclass(frozen=True, kw_only=True, slots=True)
class NameUse:
    """How the file binds names, for resolving them without scope analysis.

    ``rebound``: bound other than by one module-level import (assignments, parameters,
    loop/``with``/``except`` targets, definitions, ``global``, imported twice);
    ``nested``: imported inside a function or class; ``star``: ``from x import *`` somewhere.
    """

    rebound: frozenset[str]
    nested: frozenset[str]
    star: bool


def name_use(module: cst.Module) -> NameUse:
    collector = _Rebound()
    module.visit(collector)
    twice = {name for name, count in collector.imported.items() if count > 1}
    return NameUse(rebound=frozenset(collector.names | twice), nested=frozenset(collector.nested),
                   star=collector.star)


class _Rebound(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.nested: set[str] = set()
        self.imported: dict[str, int] = {}
        self.star = False
        self.depth = 0

    def _add(self, target: cst.CSTNode | None) -> None:
        if isinstance(target, cst.Name):
            self.names.add(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self._add(element.value)
        elif isinstance(target, cst.StarredElement):
            self._add(target.value)

    def _import(self, node: cst.Import | cst.ImportFrom) -> bool:
        names = node.names if not isinstance(node.names, cst.ImportStar) else ()
        for alias in names:
            local = alias.asname.name if alias.asname is not None else alias.name
            bound = code_of(local).split(".")[0]
            if self.depth:
                self.names.add(bound)
                self.nested.add(bound)
            else:
                self.imported[bound] = self.imported.get(bound, 0) + 1
        if isinstance(node.names, cst.ImportStar):
            self.star = True
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return self._import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return self._import(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.names.add(node.name.value)
        self.depth += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.depth -= 1

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.names.add(node.name.value)
        self.depth += 1

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.depth -= 1

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._add(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._add(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._add(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._add(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._add(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._add(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._add(node.name)  # with ... as x, except E as x (imports are handled above)

    def visit_Param(self, node: cst.Param) -> None:
        self.names.add(node.name.value)

    def visit_Global(self, node: cst.Global) -> None:
        self.names.update(item.name.value for item in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.names.update(item.name.value for item in node.names)

    def visit_Del(self, node: cst.Del) -> None:
        self._add(node.target)

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        self._add(node.name)

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        self._add(node.name)

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        self._add(node.rest)
