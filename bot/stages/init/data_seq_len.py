"""A sequence length the job takes from its data, read from the data file (the job is never run).

Some jobs have no sequence-length setting: the length is the longest example in
the dataset plus one (karpathy/makemore: ``max_word_length = max(len(w) for w in
words)`` over the lines of ``--input-file``, and ``get_output_length()`` returns
``max_word_length + 1`` for the start token). Tokens per step are then the batch
times that length, not the batch alone. This module recognises that shape — a
``max(len(x) for x in ...)`` in a function that opens a file named by a literal,
a parameter its caller fills from ``args.<flag>``, or the flag itself — reads the
file's lines (stripped, blank ones dropped, as such jobs do) and adds the constant
the code adds to that name.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infrarsi.source_text import read_source

_MAX_BYTES = 512 * 2**20  # a data file larger than this is not read to find its longest line


@dataclass(frozen=True, kw_only=True, slots=True)
class DataSeqLen:
    length: int
    note: str  # "the longest line of names.txt (15 characters) + 1 (makemore.py line 554)"


def data_sequence_length(root: Path, *, workdir: str, files: Iterable[str],
                         flag_values: dict[str, Any]) -> DataSeqLen | None:
    """The sequence length derived from the data, or None when the code does not derive one this way.

    ``flag_values`` maps argparse dests to the values the baseline runs with."""
    trees: dict[str, ast.Module] = {}
    for rel in files:
        try:
            trees[rel] = ast.parse(read_source(root / rel))
        except (OSError, UnicodeError, SyntaxError, ValueError):
            continue
    for rel, tree in trees.items():
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            found = _longest(fn)
            if found is None:
                continue
            name, line = found
            path = _opened_file(fn, trees, flag_values)
            if path is None:
                continue
            data = _resolve(root, workdir, rel, path)
            longest = _longest_line(root / data) if data is not None else None
            if longest is None:
                continue
            plus = max((_added(t, name) for t in trees.values()), default=0)
            extra = f" + {plus}" if plus else ""
            return DataSeqLen(length=longest + plus,
                              note=f"the longest line of {data} ({longest} characters){extra}, as {rel} line {line} "
                              "derives it from the data")
    return None


def _longest(fn: ast.AST) -> tuple[str, int] | None:
    """(the name assigned ``max(len(x) for x in ...)``, its line) in ``fn``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_max_len(node.value):
            target = node.targets[0]
            name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) \
                else None
            if name:
                return name, node.lineno
    return None


def _is_max_len(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "max" and node.args):
        return False
    arg = node.args[0]
    if isinstance(arg, ast.GeneratorExp | ast.ListComp):
        elt = arg.elt
        return isinstance(elt, ast.Call) and isinstance(elt.func, ast.Name) and elt.func.id == "len"
    return isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "map" and \
        bool(arg.args) and isinstance(arg.args[0], ast.Name) and arg.args[0].id == "len"


def _opened_file(fn: ast.FunctionDef | ast.AsyncFunctionDef, trees: dict[str, ast.Module],
                 flag_values: dict[str, Any]) -> str | None:
    """The path ``fn`` opens: a literal, ``args.<dest>``, or a parameter its callers pass one of those."""
    params = [a.arg for a in fn.args.args]
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open" and node.args:
            arg = node.args[0]
            value = _value(arg, flag_values)
            if value is not None:
                return value
            if isinstance(arg, ast.Name) and arg.id in params:
                return _passed(fn.name, params.index(arg.id), arg.id, trees, flag_values)
    return None


def _passed(function: str, index: int, param: str, trees: dict[str, ast.Module],
            flag_values: dict[str, Any]) -> str | None:
    for tree in trees.values():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == function):
                continue
            given = node.args[index] if index < len(node.args) else next(
                (k.value for k in node.keywords if k.arg == param), None)
            value = _value(given, flag_values) if given is not None else None
            if value is not None:
                return value
    return None


def _value(node: ast.AST, flag_values: dict[str, Any]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(flag_values.get(node.attr), str):
        return flag_values[node.attr]
    return None


def _resolve(root: Path, workdir: str, script: str, path: str) -> str | None:
    for base in (workdir, posixpath.dirname(script) or ".", "."):
        rel = posixpath.normpath(posixpath.join(base, path))
        if not rel.startswith("../") and (root / rel).is_file():
            return rel
    return None


def _longest_line(path: Path) -> int | None:
    try:
        if path.stat().st_size > _MAX_BYTES:
            return None
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return None
    lengths = [len(line) for line in lines if line]
    return max(lengths) if lengths else None


def _added(tree: ast.Module, name: str) -> int:
    """The constant the code adds to ``name`` (``self.max_word_length + 1``): the start or end token."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            sides = (node.left, node.right)
            named = any(isinstance(s, ast.Name) and s.id == name or isinstance(s, ast.Attribute) and s.attr == name
                        for s in sides)
            const = next((s.value for s in sides if isinstance(s, ast.Constant) and type(s.value) is int), None)
            if named and const is not None and 0 < const <= 8:
                return const
    return 0
