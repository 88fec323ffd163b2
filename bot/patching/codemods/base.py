"""The base every InfraRSI codemod shares: scope, reasons for declining, imports.

A codemod here is an ordinary libcst ``VisitorBasedCodemodCommand`` (so it runs
under ``libcst.codemod.transform_module`` and its added imports go through
``AddImportsVisitor``) with three additions the bot needs:

- a *scope*: the qualified symbols it may edit (``None`` is the whole file,
  ``<module>`` its module-level statements). Sites outside the scope are left alone and reported, so a patch can never
  edit what its targets do not name;
- *reasons*: when nothing was rewritten the codemod raises ``SkipFile`` with a
  sentence saying what it looked for and why each candidate site did not fit.
  "Declined" is an answer the search can learn from, not an error;
- *references*: names come from the file's existing imports when possible;
  an import is added only when nothing in the file can reach the name, and it
  is recorded in ``imports_added`` for the scope audit. Which function a call
  really reaches (``F.softmax`` after ``import torch.nn.functional as F``) is
  answered from the imports when the name is bound by nothing else in the file,
  and by libcst's ``QualifiedNameProvider`` (scope analysis, most of the cost of
  a run) only when it is, and only for a call that already looks right by name.
"""

from __future__ import annotations

from typing import Any, ClassVar, Collection, Mapping

import libcst as cst
from libcst.codemod import CodemodContext, SkipFile, VisitorBasedCodemodCommand
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import MetadataWrapper, QualifiedNameProvider

from bot.patching.codemods.imports import Bindings, NameUse, module_bindings, name_use, reference
from bot.patching.symbols import MODULE, covers


class PatchCodemod(VisitorBasedCodemodCommand):
    """Scoped, self-explaining codemod. Subclasses set ``NAME``, ``SUMMARY`` and ``NOT_FOUND``."""

    NAME: ClassVar[str] = ""
    SUMMARY: ClassVar[str] = ""
    NOT_FOUND: ClassVar[str] = "nothing to rewrite"
    # Cheap pre-check on the raw text: the pattern cannot be there unless one of these
    # substrings is. Lets a search run the whole registry over a repo without parsing
    # every file for every codemod.
    NEEDS: ClassVar[tuple[str, ...]] = ()
    NO_TORCH: ClassVar[str] = "the file does not import torch, so it is not PyTorch code this codemod knows"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.DESCRIPTION = cls.SUMMARY

    def __init__(self, context: CodemodContext, scope: Collection[str] | None = None) -> None:
        super().__init__(context)
        self.scope: frozenset[str] | None = frozenset(scope) if scope is not None else None
        self.edited: list[str] = []
        self.declined: list[str] = []
        self.imports_added: list[str] = []
        self.bindings: Bindings = {}
        self.module_node: cst.Module = cst.Module(body=[])
        self._qualified: Mapping[cst.CSTNode, Any] | None = None
        self._use: NameUse | None = None
        self._names: list[str] = []
        self._nodes: list[cst.FunctionDef | cst.ClassDef] = []

    # -- driving -----------------------------------------------------------------

    def start(self, tree: cst.Module) -> None:
        """Bind this run to ``tree`` (the copy libcst's codemod machinery hands over)."""
        self.bindings = module_bindings(tree)
        self.module_node = tree
        self._qualified = None
        self._use = None
        self.edited, self.declined, self.imports_added = [], [], []

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self.start(tree)
        if not any(bound == "torch" or bound.startswith("torch.") for bound in self.bindings.values()):
            raise SkipFile(self.NO_TORCH)
        updated = tree.visit(self)
        if not self.edited:
            raise SkipFile(self.why_not())
        return updated

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.FunctionDef | cst.ClassDef):
            self._names.append(node.name.value)
            self._nodes.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        try:
            return super().on_leave(original_node, updated_node)
        finally:
            if isinstance(original_node, cst.FunctionDef | cst.ClassDef):
                self._names.pop()
                self._nodes.pop()

    @classmethod
    def precheck(cls, source: str) -> str | None:
        """Why the codemod cannot apply to ``source``, decided from the text alone, or None."""
        if "torch" not in source:
            return cls.NO_TORCH
        if cls.NEEDS and not any(needle in source for needle in cls.NEEDS):
            return cls.NOT_FOUND
        return None

    # -- where are we ------------------------------------------------------------

    @property
    def where(self) -> str:
        """Qualified name of the innermost enclosing definition, or ``<module>``."""
        return ".".join(self._names) or MODULE

    @property
    def function(self) -> cst.FunctionDef | None:
        """The innermost enclosing function (original node), if any."""
        for node in reversed(self._nodes):
            if isinstance(node, cst.FunctionDef):
                return node
        return None

    @property
    def owner_class(self) -> cst.ClassDef | None:
        """The class whose method we are in (the class right around the innermost function)."""
        seen_function = False
        for node in reversed(self._nodes):
            if isinstance(node, cst.FunctionDef):
                seen_function = True
            elif seen_function:
                return node
        return None

    @property
    def in_class_body(self) -> bool:
        """Directly in a class body (not inside one of its methods)."""
        return bool(self._nodes) and isinstance(self._nodes[-1], cst.ClassDef)

    def in_scope(self) -> bool:
        """Whether the current position may be edited. ``<module>`` in the scope (as
        ``Rewritten.symbols`` reports module-level edits) covers module-level code only."""
        if self.scope is None:
            return True
        if not self._names:
            return MODULE in self.scope
        return any(covers(entry, self.where) for entry in self.scope)

    def site_allowed(self, what: str) -> bool:
        """Whether a matched site may be edited; a site outside the scope is reported."""
        if self.in_scope():
            return True
        self.decline(f"{what} found but outside the patch targets ({', '.join(sorted(self.scope or ()))})")
        return False

    # -- outcomes ----------------------------------------------------------------

    def mark_edited(self) -> None:
        if self.where not in self.edited:
            self.edited.append(self.where)

    def decline(self, reason: str) -> None:
        line = f"{self.where}: {reason}"
        if line not in self.declined:
            self.declined.append(line)

    def why_not(self) -> str:
        return "; ".join(self.declined) if self.declined else self.NOT_FOUND

    # -- names -------------------------------------------------------------------

    def qualnames(self, node: cst.CSTNode) -> set[str]:
        """Qualified names an (original) expression may refer to, per libcst's scope analysis.

        Resolved on first use rather than for every file: scope analysis is most of
        the cost of a run, and most files never get this far."""
        fast = self._by_import(node)
        if fast is not None:
            return fast
        if self._qualified is None:
            wrapper = MetadataWrapper(self.module_node, unsafe_skip_copy=True)
            self._qualified = wrapper.resolve(QualifiedNameProvider)
        value = self._qualified.get(node, set())
        if callable(value):  # libcst hands some values over lazily
            value = value()
        return {q.name for q in value}

    def _by_import(self, node: cst.CSTNode) -> set[str] | None:
        """The qualified names of ``a.b.c`` decided from the imports alone, or None when only
        scope analysis can tell: ``a`` bound by one module-level import and nothing else
        resolves through it; ``a`` never imported anywhere is a local or builtin, never
        torch's. Same answer as ``QualifiedNameProvider`` would give for what we ask."""
        parts: list[str] = []
        while isinstance(node, cst.Attribute):
            parts.append(node.attr.value)
            node = node.value
        if not isinstance(node, cst.Name):
            return None
        if self._use is None:
            self._use = name_use(self.module_node)
        root = node.value
        if self._use.star or root in self._use.nested:
            return None
        if root not in self.bindings:
            return set()
        if root in self._use.rebound:
            return None
        return {".".join([self.bindings[root], *reversed(parts)])}

    def is_call_to(self, node: cst.CSTNode, names: Collection[str]) -> bool:
        """Whether ``node`` calls one of the dotted ``names`` (however it was imported)."""
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        if isinstance(func, cst.Attribute):
            last = func.attr.value
        elif isinstance(func, cst.Name):
            last = func.value
        else:
            return False
        # Cheap syntactic filter first: the callee is spelled with the same last name,
        # or is a bare name a module-level import bound to one of them
        # (``from torch import tanh as th``). Scope analysis then confirms.
        if last not in {n.rsplit(".", 1)[-1] for n in names} and not (
                isinstance(func, cst.Name) and self.bindings.get(func.value) in names):
            return False
        return bool(self.qualnames(func) & set(names))

    def ref(self, dotted: str) -> cst.BaseExpression:
        """An expression for ``dotted`` through the file's imports, adding ``import <top>`` if none reaches it."""
        spelled = reference(self.bindings, dotted)
        if spelled is None:
            top = dotted.split(".")[0]
            AddImportsVisitor.add_needed_import(self.context, top)
            self.bindings[top] = top
            if f"import {top}" not in self.imports_added:
                self.imports_added.append(f"import {top}")
            spelled = dotted
        return cst.parse_expression(spelled)
