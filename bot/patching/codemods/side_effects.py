"""What a module's forward changes outside the call, read statically: why recomputing it would not be the same.

Activation checkpointing runs a block's forward a second time during backward.
That is the same computation only when the forward is a function of its inputs
and parameters. Public MoE code often is not: a router appends its auxiliary
and z-losses to a global collector that the model sums and clears once per
step (the recomputed forward registers them again, and the next step's
backward reaches a graph already freed: "Trying to backward through the graph a
second time"); other forwards bump counters or fill caches. This module walks
a class's ``forward`` and everything of the same file it calls (its own methods,
the submodules its ``__init__`` builds from classes defined there, module-level
functions), and names each statement that changes state outside the call:

- a method call on a module-level object (``MANAGER.add_aux_loss(x)``,
  ``COLLECTOR.record(...)``) other than a read (``get``, ``items``, …);
- an assignment into a module-level object (``STATS["calls"] = …``,
  ``CACHE.last = …``), a ``global`` or ``nonlocal`` statement;
- a counter or cache on the module itself: ``self.calls += 1``,
  ``self.cache[key] = …``, ``self.history.append(…)``.

A plain ``self.aux_loss = value`` is not named: it is overwritten by the
recomputation with the same value. What it cannot see: code in other files
(a collector imported from elsewhere is named only by how it is called), state
reached through a function's arguments, and mutation inside torch itself (a
BatchNorm's running statistics).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from bot.patching.codemods.imports import module_bindings
from bot.patching.symbols import code_of

#: Methods that only read a container or an object.
READS = frozenset({"get", "items", "keys", "values", "copy", "count", "index", "format", "startswith", "endswith",
                   "split", "join", "lower", "upper", "strip", "__getitem__", "__len__", "__contains__"})
#: Methods that change a container in place (a counter's or cache's on ``self``).
MUTATORS = frozenset({"append", "extend", "add", "update", "insert", "setdefault", "pop", "popitem", "clear",
                      "remove", "discard", "__setitem__"})
#: Calls that build a submodule list whose elements are one class (``nn.ModuleList([Block(c) for _ in …])``).
_CONTAINERS = frozenset({"ModuleList", "Sequential", "list", "tuple"})


class _Index:
    """One file: its classes, module-level functions and module-level objects."""

    def __init__(self, module: cst.Module) -> None:
        self.classes: dict[str, cst.ClassDef] = {}
        self.functions: dict[str, cst.FunctionDef] = {}
        self.objects: set[str] = set()
        imported = module_bindings(module)
        for statement in module.body:
            if isinstance(statement, cst.ClassDef):
                self.classes[statement.name.value] = statement
            elif isinstance(statement, cst.FunctionDef):
                self.functions[statement.name.value] = statement
            elif isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign) and isinstance(small.value, (cst.Call, cst.List, cst.Dict,
                                                                                  cst.Set, cst.ListComp,
                                                                                  cst.DictComp)):
                        for target in small.targets:
                            if isinstance(target.target, cst.Name):
                                self.objects.add(target.target.value)
        for name, dotted in imported.items():
            # ``from manager import MANAGER``: a global singleton by the convention of its name (a module, a class
            # or a function imported from elsewhere cannot be told from an object by its name otherwise)
            if "." in dotted and name.isupper() and len(name) > 1:
                self.objects.add(name)
        self.objects -= set(self.classes) | set(self.functions)

    def methods(self, cls: str) -> dict[str, cst.FunctionDef]:
        node = self.classes.get(cls)
        body = node.body.body if node is not None and isinstance(node.body, cst.IndentedBlock) else ()
        return {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}

    def submodules(self, cls: str) -> dict[str, str]:
        """``self.attr`` → the class of this file it holds (or holds a list of), as ``__init__`` builds it."""
        init = self.methods(cls).get("__init__")
        out: dict[str, str] = {}
        for small in _statements(init) if init is not None else ():
            if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                continue
            target = small.targets[0].target
            if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) \
                    and target.value.value == "self":
                built = self._built(small.value)
                if built is not None:
                    out[target.attr.value] = built
                for key, held in self._keyed(small.value):  # nanoGPT's ModuleDict(dict(h=ModuleList([...])))
                    out[f"{target.attr.value}.{key}"] = held
        return out

    def _keyed(self, value: cst.BaseExpression) -> list[tuple[str, str]]:
        """(key, class) of a ``ModuleDict(dict(key=...))`` or ``ModuleDict({"key": ...})``."""
        if not (isinstance(value, cst.Call) and _callee(value) == "ModuleDict" and value.args):
            return []
        inner = value.args[0].value
        pairs: list[tuple[str, cst.BaseExpression]] = []
        if isinstance(inner, cst.Call) and _callee(inner) == "dict":
            pairs = [(a.keyword.value, a.value) for a in inner.args if a.keyword is not None]
        elif isinstance(inner, cst.Dict):
            pairs = [(e.key.evaluated_value, e.value) for e in inner.elements if isinstance(e, cst.DictElement)
                     and isinstance(e.key, cst.SimpleString) and isinstance(e.key.evaluated_value, str)]
        return [(key, held) for key, v in pairs if (held := self._built(v)) is not None]

    def _built(self, value: cst.BaseExpression) -> str | None:
        if isinstance(value, cst.Call):
            name = _callee(value)
            if name in self.classes:
                return name
            if name in _CONTAINERS and value.args:
                return self._built(value.args[0].value)
        if isinstance(value, (cst.ListComp, cst.GeneratorExp)):
            return self._built(value.elt)
        if isinstance(value, (cst.List, cst.Tuple)) and value.elements:
            return self._built(value.elements[0].value)
        return None


def _callee(call: cst.Call) -> str:
    func = call.func
    return func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""


def _statements(function: cst.FunctionDef) -> Iterator[cst.BaseSmallStatement]:
    class Collect(cst.CSTVisitor):
        def __init__(self) -> None:
            self.found: list[cst.BaseSmallStatement] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function  # nested definitions run only when called

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, cst.BaseSmallStatement):
                self.found.append(node)
            return super().on_visit(node)

    collect = Collect()
    function.visit(collect)
    return iter(collect.found)


def _calls(function: cst.FunctionDef) -> list[cst.Call]:
    class Collect(cst.CSTVisitor):
        def __init__(self) -> None:
            self.found: list[cst.Call] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

        def visit_Call(self, node: cst.Call) -> None:
            self.found.append(node)

    collect = Collect()
    function.visit(collect)
    return collect.found


def _root(node: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return node


def _self_attr(node: cst.BaseExpression) -> str | None:
    """``attr`` of ``self.attr`` (or of ``self.attr[...]``)."""
    if isinstance(node, cst.Subscript):
        node = node.value
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


class _Walk:
    def __init__(self, index: _Index) -> None:
        self.index = index
        self.found: list[str] = []
        self.seen: set[tuple[str, str]] = set()

    def method(self, cls: str, name: str) -> None:
        function = self.index.methods(cls).get(name)
        if function is None or (cls, name) in self.seen:
            return
        self.seen.add((cls, name))
        self._body(function, f"{cls}.{name}", cls)

    def function(self, name: str) -> None:
        function = self.index.functions.get(name)
        if function is None or ("", name) in self.seen:
            return
        self.seen.add(("", name))
        self._body(function, name, None)

    def _note(self, where: str, node: cst.CSTNode, why: str) -> None:
        line = f"{where}: `{code_of(node).strip().splitlines()[0][:80]}` ({why})"
        if line not in self.found:
            self.found.append(line)

    def _body(self, function: cst.FunctionDef, where: str, cls: str | None) -> None:
        objects = self.index.objects
        for small in _statements(function):
            if isinstance(small, (cst.Global, cst.Nonlocal)):
                self._note(where, small, "rebinds a name outside the function")
            targets: list[cst.BaseExpression] = []
            if isinstance(small, cst.Assign):
                targets = [t.target for t in small.targets]
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                targets = [small.target]
            for target in targets:
                root = _root(target)
                if isinstance(root, cst.Name) and root.value in objects and root is not target:
                    self._note(where, small, f"writes into the module-level {root.value}")
                elif isinstance(small, cst.AugAssign) and _self_attr(target) is not None:
                    self._note(where, small, "a counter on the module, bumped again by a recomputation")
                elif isinstance(target, cst.Subscript) and _self_attr(target) is not None:
                    self._note(where, small, "a cache on the module, filled again by a recomputation")
        subs = self.index.submodules(cls) if cls else {}
        for call in _calls(function):
            func = call.func
            if isinstance(func, cst.Attribute):
                owner, method = func.value, func.attr.value
                root = _root(owner)
                if isinstance(root, cst.Name) and root.value in objects and method not in READS:
                    self._note(where, call, f"changes the module-level {root.value}")
                elif _self_attr(owner) is not None and method in MUTATORS:
                    self._note(where, call, "a container on the module, filled again by a recomputation")
                elif isinstance(owner, cst.Name) and owner.value == "self" and cls is not None:
                    if method in subs:
                        self.method(subs[method], "forward")
                    else:
                        self.method(cls, method)
            elif isinstance(func, cst.Subscript) and (attr := _self_attr(func)) in subs:
                self.method(subs[attr], "forward")  # self.experts[i](x)
            elif isinstance(func, cst.Name):
                self.function(func.value)
        for attr, sub in subs.items():  # ``for expert in self.experts: expert(x)``
            if f"self.{attr}" in code_of(function.body):
                self.method(sub, "forward")


def outside_mutations(module: cst.Module, cls: str) -> list[str]:
    """Each statement by which ``cls``'s forward (and what of this file it calls) changes state outside the call,
    as ``Router.forward: `MANAGER.add_aux_loss(aux)` (changes the module-level MANAGER)``."""
    walk = _Walk(_Index(module))
    walk.method(cls, "forward")
    return walk.found


def held_class(module: cst.Module, cls: str, attr: str) -> str | None:
    """The class of this file that ``self.<attr>`` of ``cls`` holds (a submodule, or a list of them)."""
    return _Index(module).submodules(cls).get(attr)
