"""What a speed patch never needs: a static scan of the code a patch adds, for a person to review before it runs.

A patch that makes a training step faster fuses, re-splits, compiles or casts. It never imports a module by
name at run time, runs code from a string, writes a file the job did not write, plays with descriptors,
streams or signals, replaces a standard-library object, walks the garbage collector or names the bot's own
records. Each of those is how a candidate would shrink the bot's clock or tamper with its records, so a patch
that adds one is *quarantined*: never run, recorded as ``rejected`` with the line named, left for a person.

The scan reads each changed Python file before and after the patch (the C parser: the user's code is never
imported) and flags only what the patch adds: a construct already in the same definition of the original is
not flagged, and a file write counts as the original's only when it writes the same destination. Names are
resolved through the file's imports and simple aliases (``import os as o``, ``from os import write``,
``w = os.write``, ``getattr(os, "write")``, ``__builtins__``), scope by scope. It is a tripwire, not a proof:
code that builds a name at run time (``getattr(torch, "sa" + "ve")``) passes it, and the witness, the lock
and the person who approves the pull request are what stand behind it (docs/trials.md, "The quarantine").
"""

from __future__ import annotations

import ast
import difflib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from bot.patching.suspicious_table import (BUILTINS, BY_NAME_ONLY, GUARDED, INTROSPECT_ATTRS, MODE_LETTERS, OPENERS,
                                           RECORDS, REROOTS, RULES, STREAMS, WHY, WRITE_METHODS, WRITE_MODE, WRITERS)
from infrarsi.trial_record import QUARANTINED


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One construct a patch adds that a speed patch never needs: where (the line in the patched file) and why."""

    path: str
    line: int
    symbol: str  # the definition it is in (``GPT.forward``), ``<module>`` for top-level code
    construct: str  # what it is: ``os.dup2``, ``open(..., 'a')``, ``time.perf_counter = ...``
    kind: str  # a key of WHY
    detail: str = ""  # what makes two of the same construct different: a destination, a literal

    @property
    def why(self) -> str:
        return WHY[self.kind]

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.construct} ({self.why})"

    def record(self) -> dict[str, object]:
        """The trial's audit entry for it (``kind: quarantined``)."""
        return {"kind": "quarantined", "path": self.path, "line": self.line, "symbol": self.symbol,
                "construct": self.construct, "why": self.why}


def quarantine_reason(findings: Sequence[Finding], violations: Sequence[object] = ()) -> str:
    """The record's reason: ``quarantined for review: train.py:41: os.dup2 (low-level fd trick: ...); ...``, and
    what else the patch did wrong (the scope audit's violations), for the person who looks at it."""
    also = f" (also outside the editable scope: {', '.join(map(str, violations))})" if violations else ""
    return QUARANTINED + "; ".join(str(f) for f in findings) + also


def scan_tree(before: Mapping[str, str | bytes], after: Mapping[str, str | bytes], paths: Sequence[str]
              ) -> tuple[Finding, ...]:
    """What the change from ``before`` to ``after`` adds, in each of ``paths`` (the changed files the scope audit
    reports) that is Python on the patched side."""
    found: list[Finding] = []
    for path in sorted(set(paths)):
        new = after.get(path)
        if not path.endswith(".py") or new is None:
            continue
        found += added(path, _text(before.get(path)), _text(new))
    return tuple(found)


def added(path: str, before: str, after: str) -> list[Finding]:
    """The findings of ``after`` that ``before`` does not have in the same definition (the destination of a write
    and the text of a literal included); lines the patch left untouched are matched to the original's first."""
    now = scan_source(after, path)
    if now is None:
        return [Finding(path=path, line=1, symbol="<module>", construct="code the scan cannot parse", kind="code")]
    had = Counter(_key(f) for f in scan_source(before, path) or ())
    touched = set(_touched(before.splitlines(), after.splitlines()))
    out = []
    for f in sorted(now, key=lambda f: (f.line in touched, f.line)):
        if had[_key(f)] > 0:
            had[_key(f)] -= 1
        else:
            out.append(f)
    return sorted(out, key=lambda f: (f.line, f.construct))


def scan_source(text: str, path: str = "<patch>") -> list[Finding] | None:
    """Every flagged construct in ``text`` (None when it does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    scanner = _Scanner(path)
    scanner.parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    scanner.visit(tree)
    return scanner.found


def _key(f: Finding) -> tuple[str, str, str]:
    return f.symbol, f.construct, f.detail


def _text(content: str | bytes | None) -> str:
    if content is None:
        return ""
    return content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content


def _touched(old: list[str], new: list[str]) -> Iterator[int]:
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            yield from range(j1 + 1, j2 + 1)


# -- names: what a name in scope is bound to --------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class _Scope:
    """A module's, function's or class's bindings: imports (name → dotted), aliases (name → the expressions
    assigned to it) and every other local name."""

    imports: dict[str, set[str]]
    aliases: dict[str, list[ast.expr]]
    local: set[str]


def _scope_of(node: ast.AST) -> _Scope:
    scope = _Scope(imports={}, aliases={}, local=set())
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        a = node.args
        scope.local.update(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x)
    for child in _own_nodes(node):
        if isinstance(child, ast.Import):
            for alias in child.names:
                bound = alias.asname or alias.name.split(".")[0]
                scope.imports.setdefault(bound, set()).add(alias.name if alias.asname else bound)
        elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
            for alias in child.names:
                if alias.name != "*":
                    scope.imports.setdefault(alias.asname or alias.name, set()).add(f"{child.module}.{alias.name}")
        elif isinstance(child, ast.Assign | ast.AnnAssign | ast.NamedExpr) and child.value is not None:
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    scope.aliases.setdefault(target.id, []).append(child.value)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            scope.local.add(child.name)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store | ast.Del):
            scope.local.add(child.id)
        elif isinstance(child, ast.ExceptHandler) and child.name:
            scope.local.add(child.name)
    return scope


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``node``'s own scope: nested functions, lambdas and classes are their own."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        yield child
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(child))


def _arguments(a: ast.arguments) -> list[ast.expr | None]:
    """What a signature evaluates when the definition runs: defaults and annotations."""
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
    return [*a.defaults, *a.kw_defaults, *(p.annotation for p in params if p is not None)]


class _Scanner(ast.NodeVisitor):
    """One file's findings, walking definitions with their scopes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.found: list[Finding] = []
        self.scopes: list[_Scope] = []
        self.names: list[str] = []
        self.counts: Counter[str] = Counter()
        self.parents: dict[int, ast.AST] = {}
        self.resolving: set[tuple[int, str]] = set()  # names whose aliases are being followed (cycles end there)
        self.known: dict[tuple[int, str], set[tuple[str, bool]]] = {}  # what a name in a scope was found to name
        self.kept: list[_Scope] = []

    # -- scopes and where a finding is --

    def visit_Module(self, node: ast.Module) -> None:
        self._enter(node, None)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        # decorators, bases, defaults and annotations run where the definition is, in the enclosing scope
        if isinstance(node, ast.ClassDef):
            outside: list[ast.expr | None] = [*node.bases, *(k.value for k in node.keywords)]
        else:
            outside = [*_arguments(node.args), node.returns]
        for expr in (*node.decorator_list, *outside):
            if expr is not None:
                self.visit(expr)
        qualname = ".".join([*self.names, node.name])
        self.counts[qualname] += 1
        self._enter(node, node.name if self.counts[qualname] == 1 else f"{node.name}#{self.counts[qualname]}")

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in _arguments(node.args):
            if expr is not None:
                self.visit(expr)
        self._push(node)
        self.visit(node.body)
        self.scopes.pop()

    def _push(self, node: ast.AST) -> None:
        scope = _scope_of(node)
        self.scopes.append(scope)
        self.kept.append(scope)  # alive until the scan ends: ``known`` is keyed by id(scope)

    def _enter(self, node: ast.AST, name: str | None) -> None:
        self._push(node)
        if name is not None:
            self.names.append(name)
        body = node.body if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
            else []
        for stmt in body:
            self.visit(stmt)
        if name is not None:
            self.names.pop()
        self.scopes.pop()

    def _flag(self, node: ast.AST, construct: str, kind: str, detail: str = "") -> None:
        self.found.append(Finding(path=self.path, line=getattr(node, "lineno", 1),
                                  symbol=".".join(self.names) or "<module>", construct=construct, kind=kind,
                                  detail=detail))

    # -- resolving names --

    def resolve(self, node: ast.expr, depth: int = 0) -> set[tuple[str, bool]]:
        """What ``node`` may name, as (dotted, explicit) pairs; ``explicit`` is False for a bare built-in name.

        A chain starts at a name, or at a module fetched by a literal name (``__import__("gc")``,
        ``importlib.import_module("os")``, ``sys.modules["time"]``)."""
        rest: list[str] = []
        while isinstance(node, ast.Attribute):
            rest.append(node.attr)
            node = node.value
        rest.reverse()
        if depth > 8:
            return set()
        if isinstance(node, ast.Name):
            roots = self._root(node.id, depth)
        else:
            fetched = self._fetched(node, depth)
            roots = {(fetched, True)} if fetched else set()
        return {(_reroot(root, rest), explicit) for root, explicit in roots}

    def _fetched(self, node: ast.expr, depth: int) -> str | None:
        """The module a dynamic import names by a literal, or the attribute ``getattr`` names by one."""
        if isinstance(node, ast.Call) and node.args:
            func = {d for d, _ in self.resolve(node.func, depth + 1)}
            first, second = _literal(node.args[0]), _literal(node.args[1]) if len(node.args) > 1 else None
            if first and func & {"builtins.__import__", "importlib.import_module", "importlib.__import__"}:
                return first
            if second and "builtins.getattr" in func:
                owner = sorted(d for d, explicit in self.resolve(node.args[0], depth + 1) if explicit)
                return f"{owner[0]}.{second}" if owner else None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            if "sys.modules" in {d for d, _ in self.resolve(node.value, depth + 1)}:
                return node.slice.value
        return None

    def _root(self, name: str, depth: int) -> set[tuple[str, bool]]:
        for scope in reversed(self.scopes):
            if name in scope.imports or name in scope.aliases:
                key = (id(scope), name)
                if key in self.known:
                    return self.known[key]
                found = {(d, True) for d in scope.imports.get(name, ())}
                if key in self.resolving:  # ``h = h.view(...)``: a name's own value says nothing new
                    return found
                outermost = not self.resolving  # only then is the answer whole, and worth keeping
                self.resolving.add(key)
                try:
                    for value in scope.aliases.get(name, ()):
                        found |= self.resolve(value, depth + 1)
                finally:
                    self.resolving.discard(key)
                if outermost:
                    self.known[key] = found
                return found
            if name in scope.local:
                return set()
        if name == "__builtins__":
            return {("builtins", True)}
        return {(f"builtins.{name}", False)} if name in BUILTINS else set()

    # -- what is flagged --

    def _reference(self, node: ast.expr) -> bool:
        """Flag ``node`` (a name or attribute chain) when the table names it; True when it did."""
        flagged = False
        for dotted, explicit in sorted(self.resolve(node)):
            rule = _rule(dotted, exact_only=not explicit)
            if rule is not None:
                self._flag(node, dotted, RULES[rule])
                flagged = True
        return flagged

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and not self._reference(node):
            self._as_value(node)

    def _as_value(self, node: ast.expr) -> None:
        """Flag a module of BY_NAME_ONLY used as a value: stored in a container, passed, returned (an alias
        ``o = os`` and ``getattr(os, ...)`` are followed, not flagged)."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) or (isinstance(parent, ast.Assign) and parent.value is node
                                                and all(isinstance(t, ast.Name) for t in parent.targets)):
            return
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node \
                and {d for d, _ in self.resolve(parent.func)} & {"builtins.getattr", "builtins.setattr",
                                                                  "builtins.delattr", "builtins.hasattr",
                                                                  "builtins.vars"}:
            return
        for dotted, explicit in sorted(self.resolve(node)):
            if explicit and dotted in BY_NAME_ONLY:
                self._flag(node, f"{dotted} as a value", "introspect")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in INTROSPECT_ATTRS:
            self._flag(node, f".{node.attr}", "introspect")
        if node.attr == "__dict__" and any(d.split(".")[0] in GUARDED for d, _ in self.resolve(node.value)):
            self._flag(node, f"{ast.unparse(node)}", "introspect")
        if isinstance(node.ctx, ast.Load) and not self._reference(node):
            self._as_value(node)
        elif isinstance(node.ctx, ast.Load):
            base: ast.expr = node  # the chain as a whole is named (its prefixes are covered by the longest rule);
            while isinstance(base, ast.Attribute):  # what it starts at may be named too (``__import__("os")``)
                base = base.value
            if not isinstance(base, ast.Name):
                self.visit(base)
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        handled = False
        resolved = sorted(self.resolve(node.func))
        for dotted, _ in resolved:
            handled |= self._call(node, dotted)
        method = node.func.attr if isinstance(node.func, ast.Attribute) and not resolved else None
        if method in WRITE_METHODS:
            self._flag(node, f".{method}()", "write", _code(node.func.value))  # type: ignore[union-attr]
        elif method == "open" and _write_mode(node, 0, literal_only=True):  # Path.open("w"), not Image.open(fp)
            self._flag(node, f".open({_mode(node, 0)})", "write", _code(node.func.value))  # type: ignore[union-attr]
        if handled:
            for arg in (*node.args, *(k.value for k in node.keywords)):
                self.visit(arg)
            if not isinstance(node.func, ast.Name):
                self.generic_visit(node.func)
        else:
            self.generic_visit(node)

    def _call(self, node: ast.Call, dotted: str) -> bool:
        """A call the table judges by its arguments; True when it was judged here."""
        if dotted in OPENERS:
            at = OPENERS[dotted]
            if _write_mode(node, at):
                self._flag(node, f"{dotted.removeprefix('builtins.')}(..., {_mode(node, at)})", "write",
                           _code(_arg(node, 0, "file")))
            return dotted != "os.fdopen"
        if dotted in WRITERS:
            if dotted != "os.open" or not _read_only_flags(node):
                self._flag(node, dotted, "write", _code(_arg(node, WRITERS[dotted], "f")))
            return True
        if dotted in ("builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.vars"):
            self._by_name(node, dotted.removeprefix("builtins."))
            return True
        return False

    def _by_name(self, node: ast.Call, verb: str) -> None:
        """``getattr(os, "write")`` is ``os.write``; ``setattr(time, ...)`` replaces a module's attribute."""
        if not node.args:
            return
        owners = self.resolve(node.args[0])
        literal = _literal(node.args[1]) if len(node.args) > 1 else None
        for owner, _ in sorted(owners):
            guarded = owner.split(".")[0] in GUARDED
            if verb == "getattr" and literal is not None:
                rule = _rule(f"{owner}.{literal}", exact_only=False)
                if rule is not None:
                    self._flag(node, f"{owner}.{literal}", RULES[rule])
            elif verb == "getattr" and guarded:
                self._flag(node, f"getattr({owner}, <a name built at run time>)", "introspect")
            elif verb == "vars" and guarded:
                self._flag(node, f"vars({owner})", "introspect")
            elif verb in ("setattr", "delattr") and guarded:
                self._flag(node, f"{verb}({owner}, {literal or '...'})", _patch_kind(f"{owner}.{literal}"))

    # -- assignments to modules' attributes --

    def _assigned(self, target: ast.expr) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._assigned(element)
            return
        if isinstance(target, ast.Starred):
            self._assigned(target.value)
            return
        if isinstance(target, ast.Attribute):
            for owner, explicit in sorted(self.resolve(target.value)):
                if explicit and owner.split(".")[0] in GUARDED:
                    self._flag(target, f"{owner}.{target.attr} = ...", _patch_kind(f"{owner}.{target.attr}"))
            self.visit(target.value)
            return
        self.visit(target)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._assigned(target)
        self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign | ast.AnnAssign) -> None:
        self._assigned(node.target)
        if node.value is not None:
            self.visit(node.value)

    visit_AnnAssign = visit_AugAssign

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._assigned(target)

    # -- imports and literals --

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            rule = _rule(alias.name, exact_only=False)
            if rule is not None:
                self._flag(node, f"import {alias.name}", RULES[rule])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.module or node.level:
            return
        for alias in node.names:
            if alias.name == "*":
                if any(r == node.module or r.startswith(node.module + ".") for r in RULES) \
                        or _rule(node.module, exact_only=False):
                    self._flag(node, f"from {node.module} import *", "import")
                continue
            rule = _rule(f"{node.module}.{alias.name}", exact_only=False)
            if rule is not None:
                self._flag(node, f"from {node.module} import {alias.name}", RULES[rule])

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            return
        lowered = value.lower()
        hit = next((r for r in RECORDS if r.lower() in lowered), None)
        if hit is not None:
            self._flag(node, f"string naming {hit!r}", "records", value[:80])


def _rule(dotted: str, *, exact_only: bool) -> str | None:
    """The longest entry of the table covering ``dotted`` (only ``dotted`` itself for a bare built-in)."""
    if exact_only:
        return dotted if dotted in RULES else None
    parts = dotted.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in RULES), None)


def _reroot(root: str, rest: list[str]) -> str:
    """``harness.time.perf_counter`` is ``time.perf_counter``: a module reached through another module's
    attribute counts as itself (``torch.signal`` is torch's own module, not the standard library's)."""
    parts = [*root.split("."), *rest]
    if parts[0] in GUARDED:
        return ".".join(parts)
    for i, name in enumerate(parts[1:], start=1):
        if name in REROOTS and not (parts[0] == "torch" and name == "signal"):
            return ".".join([REROOTS[name], *parts[i + 1:]])
    return ".".join(parts)


def _patch_kind(dotted: str) -> str:
    return "stream" if dotted in STREAMS or dotted.rsplit(".", 1)[0] in STREAMS else "patch"


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _arg(node: ast.Call, at: int, keyword: str) -> ast.expr | None:
    if len(node.args) > at:
        return node.args[at]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def _mode(node: ast.Call, at: int) -> str:
    mode = _arg(node, at, "mode")
    return "<mode not a literal>" if mode is None else ast.unparse(mode)


def _write_mode(node: ast.Call, at: int, *, literal_only: bool = False) -> bool:
    """Whether a call opens for writing: a literal mode with w, a, x or +; any mode the scan cannot read (unless
    ``literal_only``: then only a literal that is a mode)."""
    mode = _arg(node, at, "mode")
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return bool(WRITE_MODE & set(mode.value)) and (not literal_only or set(mode.value) <= MODE_LETTERS)
    return not literal_only


def _read_only_flags(node: ast.Call) -> bool:
    flags = _arg(node, 1, "flags")
    return flags is not None and ast.unparse(flags) in ("os.O_RDONLY", "O_RDONLY", "0")


def _code(node: ast.expr | None) -> str:
    return "" if node is None else ast.unparse(node)
