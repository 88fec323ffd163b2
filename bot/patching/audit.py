"""The scope audit: does a candidate tree change only what the contract lets patches change?

Run on every candidate before it is trusted with a trial, whatever produced it
(a codemod, a replacement, a model). The rule, from the contract's scope:

- a locked path (exact path or glob) must be byte-identical;
- no file may be added or deleted;
- in a changed Python file, every definition is compared by qualified name
  (``model.py::GPT.forward``) on its *own* code, with the definitions nested in
  it replaced by named placeholders, and so is the module's own code (its
  top-level statements). A difference is allowed only inside an editable
  symbol (a class covers its methods) or anywhere in a file whose bare path is
  editable;
- an import statement that was not there before is allowed only with
  ``allow_imports``, wherever it is (even inside an editable function): imports
  are how new dependencies get in;
- any other changed file must be editable as a whole.

Every byte of a file belongs to exactly one unit (a definition's own code or
the module's), blank lines aside, so no change can slip between the units.
Each changed unit is reported as an :class:`AuditedChange` with git blob ids
of the file before and after, so the record can be checked against history.
"""

from __future__ import annotations

import ast

import difflib
import fnmatch
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Sequence

import libcst as cst

from bot.patching.symbols import FILE, MODULE, covers, def_sites, split_target
from infrarsi.source_text import decode_source

NULL_BLOB = "0" * 40  # git's id for "no such file on this side"


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    """One reason the tree is rejected: where, in which symbol, and why."""

    path: str
    symbol: str
    reason: str

    def __str__(self) -> str:
        where = self.path if self.symbol == FILE else f"{self.path}::{self.symbol}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditedChange:
    """One changed unit: a definition (``symbol`` is its qualified name), the module's own
    statements (``<module>``) or a whole non-Python / added / deleted file (``<file>``).

    ``line_start``/``line_end`` are 1-based, inclusive, in the after file (None when the
    unit no longer exists there); line counts are those of the unit's own code.
    """

    path: str
    symbol: str
    lines_added: int
    lines_removed: int
    blob_before: str
    blob_after: str
    line_start: int | None
    line_end: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditResult:
    changes: tuple[AuditedChange, ...]
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def blob_id(content: bytes) -> str:
    """The git blob id of ``content`` (what ``git hash-object`` prints), without git."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def audit_tree(before: Mapping[str, str | bytes], after: Mapping[str, str | bytes], *,
               editable: Sequence[str], locked: Sequence[str], allow_imports: bool) -> AuditResult:
    """Compare two trees (repo-relative POSIX path → content) against the contract's scope."""
    scope = _editable_by_path(editable)
    changes: list[AuditedChange] = []
    violations: list[Violation] = []
    for path in sorted(set(before) | set(after)):
        old = _bytes(before.get(path))
        new = _bytes(after.get(path))
        if old == new:
            continue
        blobs = (blob_id(old) if old is not None else NULL_BLOB, blob_id(new) if new is not None else NULL_BLOB)
        pattern = _locked_by(path, locked)
        if old is None or new is None or pattern is not None or not path.endswith(".py"):
            changes.append(_file_change(path, old, new, blobs))
            reason = _file_reason(path, old, new, pattern, scope)
            if reason is not None:
                violations.append(Violation(path=path, symbol=FILE, reason=reason))
            continue
        found_changes, found_violations = _audit_python(path, old, new, blobs, scope.get(path, frozenset()),
                                                        allow_imports)
        changes.extend(found_changes)
        violations.extend(found_violations)
    return AuditResult(changes=tuple(changes), violations=tuple(violations))


# -- scope --------------------------------------------------------------------------

def _editable_by_path(editable: Sequence[str]) -> dict[str, frozenset[str] | None]:
    """Path → editable qualified names, or None when the whole file is editable."""
    out: dict[str, set[str] | None] = {}
    for entry in editable:
        path, symbol = split_target(entry)
        if symbol is None:
            out[path] = None
        elif path not in out or out[path] is not None:
            out.setdefault(path, set()).add(symbol)  # type: ignore[union-attr]
    return {path: (None if symbols is None else frozenset(symbols)) for path, symbols in out.items()}


def _locked_by(path: str, locked: Sequence[str]) -> str | None:
    """The locked entry covering ``path``: the same matching as the contract's own check
    (exact path or ``fnmatch`` glob), plus a directory entry covering what is under it."""
    for pattern in locked:
        bare = pattern.rstrip("/")
        if path == bare or fnmatch.fnmatchcase(path, pattern) or path.startswith(bare + "/"):
            return pattern
    return None


def _file_reason(path: str, old: bytes | None, new: bytes | None, pattern: str | None,
                 scope: Mapping[str, frozenset[str] | None]) -> str | None:
    if pattern is not None:
        what = "created" if old is None else "deleted" if new is None else "modified"
        return f"locked path {what} (matches locked entry {pattern!r})"
    if old is None:
        return "new file (patches may only edit existing files)"
    if new is None:
        return "file deleted (patches may only edit existing files)"
    if path in scope and scope[path] is None:
        return None
    return "file changed outside the editable scope"


def _file_change(path: str, old: bytes | None, new: bytes | None, blobs: tuple[str, str]) -> AuditedChange:
    old_lines = _lines(old)
    new_lines = _lines(new)
    added, removed = _counts(old_lines, new_lines)
    span = _changed_span(old_lines, new_lines) if new is not None else None
    return AuditedChange(path=path, symbol=FILE, lines_added=added, lines_removed=removed,
                         blob_before=blobs[0], blob_after=blobs[1],
                         line_start=span[0] if span else None, line_end=span[1] if span else None)


# -- one Python file --------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class _Unit:
    """A definition's (or the module's) own code, nested definitions as placeholders."""

    code: str
    children: tuple[str, ...]  # names of the definitions directly inside
    span: tuple[int, int] | None  # lines in its file (definitions only)


def _audit_python(path: str, old: bytes, new: bytes, blobs: tuple[str, str],
                  editable: frozenset[str] | None, allow_imports: bool
                  ) -> tuple[list[AuditedChange], list[Violation]]:
    changes: list[AuditedChange] = []
    violations: list[Violation] = []
    trees: list[cst.Module] = []
    cuts: list[tuple[dict[str, _Unit], list[tuple[str, str]]]] = []
    for side, data in (("before", old), ("after", new)):
        try:
            module, units, imports = _cut(decode_source(data))
        except (UnicodeError, cst.ParserSyntaxError) as e:
            change = _file_change(path, old, new, blobs)
            message = " ".join(str(e).split())
            return [change], [Violation(path=path, symbol=MODULE,
                                        reason=f"cannot be parsed {side} the change: {message}")]
        trees.append(module)
        cuts.append((units, imports))
    (before_units, before_imports), (after_units, after_imports) = cuts
    after_lines = _lines(new)
    added_imports = sorted(set(after_imports) - set(before_imports))
    removed_imports = sorted(set(before_imports) - set(after_imports))

    for symbol in sorted(set(before_units) | set(after_units), key=lambda s: (s != MODULE, s)):
        was, now = before_units.get(symbol), after_units.get(symbol)
        if was is not None and now is not None and was.code == now.code:
            continue
        added, removed = _counts(_text_lines(was.code if was else ""), _text_lines(now.code if now else ""))
        span = now.span if now is not None else None
        if symbol == MODULE:
            span = _module_span(_lines(old), after_lines, after_units)
        changes.append(AuditedChange(path=path, symbol=symbol, lines_added=added, lines_removed=removed,
                                     blob_before=blobs[0], blob_after=blobs[1],
                                     line_start=span[0] if span else None, line_end=span[1] if span else None))
        plain = symbol.split("#", 1)[0]
        if editable is None or (symbol != MODULE and any(covers(e, plain) for e in editable)):
            continue
        if symbol == MODULE and _without_imports(trees[0]) == _without_imports(trees[1]):
            # Only top-level import lines differ. Added and removed imports are judged
            # below; any other difference in them (a comment, the order) needs allow_imports.
            explained = any(w == MODULE for _, w in added_imports + removed_imports)
            if allow_imports or explained:
                continue
            violations.append(Violation(path=path, symbol=MODULE,
                                        reason="module-level import lines changed (imports are not editable here)"))
            continue
        violations.append(Violation(path=path, symbol=symbol, reason=_why(was, now, editable)))

    if not changes:  # only blank lines between definitions moved: nothing to judge, but say the file changed
        span = _changed_span(_lines(old), after_lines)
        added, removed = _counts(_lines(old), after_lines)
        changes.append(AuditedChange(path=path, symbol=MODULE, lines_added=added, lines_removed=removed,
                                     blob_before=blobs[0], blob_after=blobs[1],
                                     line_start=span[0] if span else None, line_end=span[1] if span else None))
    if not allow_imports:
        for statement, where in added_imports:
            violations.append(Violation(path=path, symbol=where,
                                        reason=f"adds `{statement}` (the contract does not allow new imports)"))
    if editable is not None:
        for statement, where in removed_imports:
            if where == MODULE:
                violations.append(Violation(path=path, symbol=MODULE,
                                            reason=f"removes module-level `{statement}`"))
    return changes, violations


def _why(was: _Unit | None, now: _Unit | None, editable: frozenset[str] | None) -> str:
    scope = ", ".join(sorted(editable or ())) or "none in this file"
    if was is None:
        return f"new definition outside the editable scope (editable here: {scope})"
    if now is None:
        return f"definition removed outside the editable scope (editable here: {scope})"
    gone = [c for c in was.children if c not in now.children]
    new = [c for c in now.children if c not in was.children]
    detail = "".join([f"; removes `{c}`" for c in gone] + [f"; adds `{c}`" for c in new])
    return f"changed outside the editable scope (editable here: {scope}){detail}"


def _ast_spans(text: str) -> list[tuple[int, int]]:
    """(first line incl. decorators, last line) of every definition in source order, via the C parser.

    The order is the same pre-order walk as :func:`def_sites`, so the two zip together;
    libcst's PositionProvider gives the same lines at several times the cost.
    """
    spans: list[tuple[int, int]] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                spans.append((start, child.end_lineno or child.lineno))
            walk(child)

    walk(ast.parse(text))
    return spans


def _units(module: cst.Module, text: str) -> tuple[dict[str, _Unit], list[tuple[str, str]]]:
    """Every unit of a module by qualified name, and its imports as (statement, where) pairs."""
    spans = _ast_spans(text)
    units: dict[str, _Unit] = {}
    counts: dict[str, int] = {}
    sites = def_sites(module)
    parents = {site.qualname.rsplit(".", 1)[0] for site in sites if "." in site.qualname}
    if len(spans) != len(sites):  # the two parsers disagree on what a definition is: say nothing wrong
        spans = [(0, 0)] * len(sites)
    for site, span in zip(sites, spans):
        node = site.node
        name = site.qualname
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > 1:
            name = f"{name}#{counts[name]}"  # redefinitions, overloads, property setters
        if site.qualname in parents or _has_nested_def(node):
            unit = _Unit(code=module.code_for_node(node.visit(_Stub(node))), children=_child_names(node),
                         span=span)
        else:
            # A leaf definition is its own code: no transform over its body (the audit's hot path).
            unit = _Unit(code=module.code_for_node(node.with_changes(
                leading_lines=[line for line in node.leading_lines if line.comment])), children=(),
                span=span)
        units[name] = unit
    units[MODULE] = _Unit(code=module.visit(_Stub(module)).code, children=_child_names(module), span=None)
    return units, _imports(module)


class _Stub(cst.CSTTransformer):
    """Replace every definition below ``root`` (not ``root`` itself) with a named placeholder,
    and drop blank lines in front of ``root`` (they carry no meaning)."""

    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node is self.root or not isinstance(node, cst.FunctionDef | cst.ClassDef)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        if original_node is self.root and isinstance(updated_node, cst.FunctionDef | cst.ClassDef):
            return updated_node.with_changes(leading_lines=[l for l in updated_node.leading_lines if l.comment])
        if isinstance(original_node, cst.FunctionDef | cst.ClassDef):
            # Comments above a definition are part of that definition's own unit, not its parent's.
            kind = "class" if isinstance(original_node, cst.ClassDef) else "def"
            return cst.SimpleStatementLine(body=[cst.Expr(cst.Name(f"__{kind}_{original_node.name.value}__"))])
        return updated_node


def _has_nested_def(node: cst.FunctionDef | cst.ClassDef) -> bool:
    """Whether a definition holds another one directly in its body (cheap: top-level statements only)."""
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    return any(isinstance(stmt, cst.FunctionDef | cst.ClassDef) for stmt in body)


def _child_names(root: cst.CSTNode) -> tuple[str, ...]:
    names: list[str] = []

    class _Children(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if node is not root and isinstance(node, cst.FunctionDef | cst.ClassDef):
                names.append(node.name.value)
                return False
            return True

    root.visit(_Children())
    return tuple(names)


def _imports(module: cst.Module) -> list[tuple[str, str]]:
    """Each imported name as its own statement (``from a import b as c``), with its unit."""
    found: list[tuple[str, str]] = []
    for site in [None, *def_sites(module)]:
        root: cst.CSTNode = module if site is None else site.node
        where = MODULE if site is None else site.qualname

        class _Imports(cst.CSTVisitor):
            def on_visit(self, node: cst.CSTNode) -> bool:
                if node is not root and isinstance(node, cst.FunctionDef | cst.ClassDef):
                    return False
                if isinstance(node, cst.Import):
                    for alias in node.names:
                        found.append((_alias("import ", alias), where))
                elif isinstance(node, cst.ImportFrom):
                    source = "." * len(node.relative) + (module.code_for_node(node.module) if node.module else "")
                    if isinstance(node.names, cst.ImportStar):
                        found.append((f"from {source} import *", where))
                    else:
                        for alias in node.names:
                            found.append((_alias(f"from {source} import ", alias), where))
                return True

        root.visit(_Imports())
    return found


def _alias(prefix: str, alias: cst.ImportAlias) -> str:
    text = prefix + cst.Module(body=[]).code_for_node(alias.name)
    if alias.asname is not None:
        text += " as " + cst.Module(body=[]).code_for_node(alias.asname.name)
    return text


def _without_imports(module: cst.Module) -> str:
    """The module's own code with its top-level import lines taken out."""
    body = [s for s in module.body
            if not (isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Import | cst.ImportFrom)
                                                                  for x in s.body))]
    stripped = module.with_changes(body=body)
    return stripped.visit(_Stub(stripped)).code


# -- lines --------------------------------------------------------------------------

def _bytes(content: str | bytes | None) -> bytes | None:
    if content is None or isinstance(content, bytes):
        return content
    return content.encode("utf-8")


def _lines(content: bytes | None) -> list[str]:
    if content is None:
        return []
    return content.decode("utf-8", errors="replace").splitlines()


def _text_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _counts(old: list[str], new: list[str]) -> tuple[int, int]:
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def _touched(old: list[str], new: list[str]) -> list[int]:
    """1-based after-file lines a diff touches (a pure deletion marks the line after it)."""
    lines: list[int] = []
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            lines.extend(range(j1 + 1, j2 + 1))
        elif tag == "delete":
            lines.append(max(1, min(j1 + 1, len(new))))
    return lines


def _changed_span(old: list[str], new: list[str]) -> tuple[int, int] | None:
    lines = _touched(old, new)
    return (min(lines), max(lines)) if lines else None


def _module_span(old: list[str], new: list[str], units: Mapping[str, _Unit]) -> tuple[int, int] | None:
    """Changed after-file lines outside every top-level definition."""
    spans = [u.span for name, u in units.items() if u.span is not None and name != MODULE]
    lines = [n for n in _touched(old, new) if not any(a <= n <= b for a, b in spans)]
    if not lines:
        return _changed_span(old, new)
    return min(lines), max(lines)


@lru_cache(maxsize=32)
def _cut(text: str) -> tuple[cst.Module, dict[str, _Unit], list[tuple[str, str]]]:
    """A file's tree, units and imports, memoised by its text: a base file is audited against every
    patch proposed for it, and a claim reads the same units again. Callers never mutate the result."""
    module = cst.parse_module(text)
    units, imports = _units(module, text)
    return module, units, imports


def unit_codes(text: str) -> dict[str, str] | None:
    """Each unit's own code (definitions by qualified name, ``<module>`` for the module's own statements),
    as the audit compares them; None when the text does not parse. Two trees whose files have equal unit
    codes differ at most in blank lines between definitions."""
    try:
        _, units, _ = _cut(text)
    except Exception:  # noqa: BLE001 - libcst and ast disagree on some inputs; either way: not parseable
        return None
    return {name: unit.code for name, unit in units.items()}
