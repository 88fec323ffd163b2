"""The files and folders a job names in its code and on its command line, as paths in the repo (read, not run).

Datasets are opened by a literal (``open('input.txt')``), a joined literal
(``os.path.join('data', 'train.bin')``, ``os.path.join(dataset, 'train.bin')``
with ``dataset = 'data'`` above it, ``Path(__file__).parent / 'data'``), or a
setting's value (``--input-file names.txt``, its argparse default). Each is
resolved the way the job would resolve it — from its working directory, then
from the script's folder and the repo's root — and kept when it exists. What the
job writes (an output folder setting, ``os.makedirs``, ``torch.save``, ``open(…, 'w')``)
is marked, so it is never taken for data.
"""

from __future__ import annotations

from infrarsi.rundir import STATE_DIR

import ast
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from infrarsi.source_text import read_source

#: Settings whose value is where the job writes (makemore's ``--work-dir``, nanoGPT's ``out_dir``).
OUTPUT_SETTING = re.compile(r"(^|_)(out|output|outputs|work|save|log|logging|ckpt|checkpoint|results|tensorboard|"
                            r"wandb|runs|export)(_?dir|_?path|_?folder|_?root)?$|^(work_?dir|out_?dir|output_?dir|"
                            r"save_?dir|log_?dir|logdir|ckpt_?dir|checkpoint_?dir|save_?path|output_?path)$")
_WRITERS = {"makedirs", "mkdir", "save", "savez", "savetxt", "SummaryWriter", "to_csv", "write_text", "write_bytes",
            "save_pretrained", "save_checkpoint", "tofile"}
_MAX_LEN = 256


@dataclass(frozen=True, kw_only=True, slots=True)
class PathRef:
    """One path the job names, resolved in the repo."""

    path: str  # repo-relative and normalised; ``../data`` for one level above the repo
    where: str  # "projects/chargpt/chargpt.py line 87", "the command", "--input-file's default"
    written: bool = False  # the job writes there (an output), it does not read it


@dataclass(frozen=True, kw_only=True, slots=True)
class _Literal:
    text: str
    line: int
    base: str | None = None  # a folder the text is relative to (``__file__``'s), else the job's own
    written: bool = False


def path_references(root: Path, *, workdir: str, entry: str | None, files: Iterable[str],
                    values: Sequence[tuple[str, str, bool]] = ()) -> list[PathRef]:
    """Existing paths named in ``files`` (repo-relative Python files the job runs) and in ``values``
    ((text, where, written): the command's arguments and the settings' values), first naming wins."""
    bases = list(dict.fromkeys([workdir, posixpath.dirname(entry) if entry else workdir, "."]))
    found: dict[str, PathRef] = {}

    def add(text: str, where: str, written: bool, base: str | None = None) -> None:
        rel = _resolve(root, text, [base] if base is not None else bases)
        if rel is None:
            return
        if rel in found:
            if written and not found[rel].written:
                found[rel] = PathRef(path=rel, where=found[rel].where, written=True)
            return
        found[rel] = PathRef(path=rel, where=where, written=written)

    for text, where, written in values:
        add(text, where, written)
    for rel in files:
        try:
            tree = ast.parse(read_source(root / rel))
        except (OSError, UnicodeError, SyntaxError, ValueError):
            continue
        for lit in _literals(tree, posixpath.dirname(rel) or "."):
            add(lit.text, f"{rel} line {lit.line}", lit.written, lit.base)
    return list(found.values())


def _resolve(root: Path, text: str, bases: Sequence[str]) -> str | None:
    text = text.strip()
    if not text or len(text) > _MAX_LEN or "\n" in text or text.startswith(("-", "http:", "https:")) or \
            any(c in text for c in "*?{}<>|\0"):
        return None
    if os.path.isabs(text):
        try:
            rel = Path(text).relative_to(root).as_posix()
        except ValueError:
            return None
        return rel if (root / rel).exists() else None
    for base in bases:
        rel = posixpath.normpath(posixpath.join(base, text))
        if rel in (".", "..") or rel.startswith("../../") or rel == posixpath.normpath(base):
            continue  # the job's own folder (a "" or "./" literal) names no file
        if rel.split("/", 1)[0] in (".git", STATE_DIR):
            continue
        if (root / rel).exists():
            return rel
    return None


def _literals(tree: ast.Module, here: str) -> list[_Literal]:
    """Strings a module uses as paths: literals, joins of literals and of module-level string names."""
    names = _string_globals(tree)
    out: list[_Literal] = []
    written: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            target = _written_target(node, func)
            if target is not None:
                written.add(id(target))
    for node in ast.walk(tree):
        value = _string_of(node, names, here)
        if value is None:
            continue
        text, base = value
        out.append(_Literal(text=text, line=getattr(node, "lineno", 0), base=base, written=id(node) in written))
    return out


def _written_target(call: ast.Call, func: str) -> ast.AST | None:
    """The path argument of a call that writes there (``os.makedirs(x)``, ``torch.save(obj, x)``, ``open(x, 'w')``)."""
    args = list(call.args)
    if func == "open" and len(args) >= 2 and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str) \
            and any(m in args[1].value for m in "wax"):
        return args[0]
    if func in _WRITERS and args:
        return args[1] if func in ("save", "savez", "savetxt") and len(args) > 1 else args[0]
    return None


def _string_globals(tree: ast.Module) -> dict[str, str]:
    """Module-level names assigned a string literal exactly once (nanoGPT's ``dataset = 'shakespeare_char'``)."""
    seen: dict[str, list[str | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    value = node.value.value if isinstance(node.value, ast.Constant) and \
                        isinstance(node.value.value, str) else None
                    seen.setdefault(target.id, []).append(value)
    return {k: v[0] for k, v in seen.items() if len(v) == 1 and v[0] is not None}


def _string_of(node: ast.AST, names: dict[str, str], here: str) -> tuple[str, str | None] | None:
    """(text, the folder it is relative to or None for the job's) of a path expression made of literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, None
    if isinstance(node, ast.Call):
        func = node.func
        joined = (isinstance(func, ast.Attribute) and func.attr == "join" and _code(func.value).endswith("path")) \
            or (isinstance(func, ast.Name) and func.id in ("Path", "PurePath")) \
            or (isinstance(func, ast.Attribute) and func.attr in ("Path", "PurePath"))
        if joined and node.args and len(node.args) >= (2 if isinstance(func, ast.Attribute) and
                                                          func.attr == "join" else 1):
            parts = [_part(a, names, here) for a in node.args]
            if all(p is not None for p in parts) and (len(parts) > 1 or parts[0][1] is not None):
                return _join(parts)  # type: ignore[arg-type]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = _part(node.left, names, here), _part(node.right, names, here)
        if left is not None and right is not None and (left[1] is not None or _is_path_call(node.left)):
            return _join([left, right])
    return None


def _part(node: ast.AST, names: dict[str, str], here: str) -> tuple[str, str | None] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, None
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id], None
    code = _code(node)
    if re.fullmatch(r"(os\.path\.)?dirname\((os\.path\.)?(abspath|realpath)?\(?__file__\)?\)|"
                    r"Path\(__file__\)(\.resolve\(\))?\.parent|__file__", code) and code != "__file__":
        return "", here
    if isinstance(node, ast.Call | ast.BinOp):
        return _string_of(node, names, here)
    return None


def _join(parts: list[tuple[str, str | None]]) -> tuple[str, str | None]:
    base = next((b for _, b in parts if b is not None), None)
    text = posixpath.join(*[t for t, _ in parts if t]) if any(t for t, _ in parts) else "."
    return text, base


def _is_path_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _code(node.func).split(".")[-1] in ("Path", "PurePath")


def _code(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, AttributeError):  # pragma: no cover - a node ast cannot print
        return ""
