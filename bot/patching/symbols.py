"""Qualified names of definitions in a libcst tree: ``Class.method``, ``function``, ``Outer.Inner``.

The same naming as the contract's scope (:mod:`infrarsi.contract.scope`, which
uses ``ast``): every function or class gets its enclosing definitions' names
joined with dots, nested functions included, wherever it sits (``if``/``try``
blocks do not add a level). Replacement, codemod scoping and the audit all use
this one walk so that they agree on what a symbol is.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

MODULE = "<module>"
FILE = "<file>"

Definition = cst.FunctionDef | cst.ClassDef


@dataclass(frozen=True, kw_only=True, slots=True)
class DefSite:
    """One definition and its qualified name; ``node`` is the node in the walked tree."""

    qualname: str
    node: Definition


class _Collector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.stack: list[str] = []
        self.sites: list[DefSite] = []

    def _push(self, node: Definition) -> bool:
        qualname = ".".join([*self.stack, node.name.value])
        self.sites.append(DefSite(qualname=qualname, node=node))
        self.stack.append(node.name.value)
        return True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return self._push(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self._push(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.stack.pop()


def def_sites(tree: cst.CSTNode) -> tuple[DefSite, ...]:
    """Every definition under ``tree`` in source order (names relative to ``tree``)."""
    collector = _Collector()
    tree.visit(collector)
    return tuple(collector.sites)


def definitions(tree: cst.CSTNode) -> dict[str, list[Definition]]:
    """Qualified name → the definitions with that name (more than one for redefinitions,
    ``@overload``s and property setters), in source order."""
    out: dict[str, list[Definition]] = {}
    for site in def_sites(tree):
        out.setdefault(site.qualname, []).append(site.node)
    return out


def covers(entry: str, qualname: str) -> bool:
    """Whether the scope entry ``entry`` (a qualified name) includes ``qualname``:
    itself, or anything defined inside it (a class covers its methods)."""
    return qualname == entry or qualname.startswith(entry + ".")


def split_target(target: str) -> tuple[str, str | None]:
    """``"model.py::GPT.forward"`` → ``("model.py", "GPT.forward")``; a bare path → ``(path, None)``."""
    path, sep, symbol = target.partition("::")
    return path, (symbol if sep else None)


def code_of(node: cst.CSTNode) -> str:
    """Source text of a node, as libcst would print it in a module with default settings."""
    return cst.Module(body=[]).code_for_node(node)
