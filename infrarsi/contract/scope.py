"""Resolve and check the contract's scope against the tree: paths exist, symbols exist, no overlap.

Symbols are found with the standard library's ``ast`` (the engine does not
depend on libcst); a qualified symbol is ``path.py::Class.method``.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path, PurePosixPath

from infrarsi.contract.errors import ContractError
from infrarsi.contract.model import Scope
from infrarsi.rundir import STATE_DIR
from infrarsi.source_text import read_source


def split_symbol(entry: str) -> tuple[str, str | None]:
    """``"model.py::GPT.forward"`` → ``("model.py", "GPT.forward")``; a bare path has no symbol."""
    path, sep, symbol = entry.partition("::")
    return path, (symbol if sep else None)


def defined_symbols(source: str) -> set[str]:
    """Every qualified name a module defines: functions, classes, methods, nested ones."""
    names: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{node.name}"
                names.add(name)
                walk(node.body, name + ".")

    walk(ast.parse(source).body, "")
    return names


def is_locked(path: str, patterns: tuple[str, ...]) -> str | None:
    """The locked pattern that covers ``path``, if any."""
    for pattern in patterns:
        if path == pattern or fnmatch.fnmatchcase(path, pattern):
            return pattern
    return None


def expand_locked(root: Path, patterns: tuple[str, ...]) -> dict[str, list[str]]:
    """Each locked pattern with the repo files it covers (sorted, POSIX, repo-relative)."""
    out: dict[str, list[str]] = {}
    for pattern in patterns:
        matches = sorted(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())
        out[pattern] = [m for m in matches if not m.startswith(f"{STATE_DIR}/") and not m.startswith(".git/")]
    return out


def _inside(entry: str) -> bool:
    p = PurePosixPath(entry)
    return bool(entry) and not p.is_absolute() and ".." not in p.parts


def check_scope(scope: Scope, *, root: Path, file: str, prefix: str) -> None:
    """Raise a :class:`ContractError` for the first scope entry that cannot be right."""
    key = f"{prefix}.scope" if prefix else "scope"
    for pattern, matches in expand_locked(root, tuple(p for p in scope.locked if _inside(p))).items():
        if not matches:
            raise ContractError(file, f"{key}.locked", f"expected paths of files in the repo, got {pattern!r} "
                                "(matches no file)")
    for entry in scope.locked:
        if not _inside(entry):
            raise ContractError(file, f"{key}.locked", f"expected a path inside the repo, got {entry!r}")
    for entry in scope.editable:
        path, symbol = split_symbol(entry)
        if not _inside(path):
            raise ContractError(file, f"{key}.editable", f"expected a path inside the repo, got {entry!r}")
        target = root / path
        if not target.is_file():
            raise ContractError(file, f"{key}.editable", f"expected an existing file, got {entry!r} "
                                f"({path} does not exist)")
        pattern = is_locked(path, scope.locked)
        if pattern is not None:
            raise ContractError(file, f"{key}.editable", f"expected symbols outside locked files, got {entry!r} "
                                f"(inside locked {pattern!r})")
        if symbol is not None:
            if not path.endswith(".py"):
                raise ContractError(file, f"{key}.editable", f"expected a Python file for a qualified symbol, "
                                    f"got {entry!r}")
            try:
                names = defined_symbols(read_source(target))
            except (SyntaxError, UnicodeError) as e:
                raise ContractError(file, f"{key}.editable", f"cannot parse {path} to find {symbol!r}: {e}") from None
            if symbol not in names:
                raise ContractError(file, f"{key}.editable", f"expected a function or class defined in {path}, "
                                    f"got {entry!r} (no such definition)")
