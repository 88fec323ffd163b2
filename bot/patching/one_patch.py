"""Apply one patch spec to a working tree, in place, without ever raising; and the order a set applies in.

One patch is all-or-nothing: every target file is rewritten in memory first
and files are written only when none failed, so a ``Failed`` or
``NotApplicable`` patch leaves the tree as it was. A set is applied in one
canonical order (requirements first, then by id): :mod:`bot.patching.patch_set`.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Collection, Iterable, Mapping

import libcst as cst

from bot.patching.codemods import run_codemod
from bot.patching.replace import replace_definition
from bot.patching.results import (
    Applied,
    Broken,
    Declined,
    Failed,
    FileOutcome,
    NotApplicable,
    PatchResult,
    Rewritten,
)
from bot.patching.symbols import definitions, split_target
from infrarsi.conflicts import blocking
from infrarsi.patches import PatchSpec
from infrarsi.source_text import decode_source, encode_source


def apply_patch(root: Path, spec: PatchSpec, *, applied: Collection[str] | Mapping[str, PatchSpec] = ()
                ) -> PatchResult:
    """Apply one patch to the tree at ``root``. ``applied`` are the patches already in the tree (their
    ids, or their specs by id), against which ``requires`` and the conflict rule
    (:mod:`infrarsi.conflicts`; given bare ids, only what ``spec`` names in ``conflicts_with``) are
    checked first."""
    present: list[PatchSpec | str] = list(applied.values()) if isinstance(applied, Mapping) else list(applied)
    try:
        return _apply(Path(root), spec, frozenset(applied), present)
    except Exception as e:  # noqa: BLE001 - the contract of this function is to never raise
        return Failed(patch_id=spec.id, error=f"{type(e).__name__}: {e}")


def canonical_order(specs: Iterable[PatchSpec]) -> tuple[list[PatchSpec], list[PatchSpec]]:
    """(ordered, cyclic): requirements before the patches needing them, ties by id;
    patches caught in a requirement cycle are returned apart."""
    by_id = {s.id: s for s in specs}
    needs = {s.id: {r for r in s.requires if r in by_id} for s in by_id.values()}
    ready = [i for i, n in needs.items() if not n]
    heapq.heapify(ready)
    ordered: list[PatchSpec] = []
    done: set[str] = set()
    while ready:
        current = heapq.heappop(ready)
        ordered.append(by_id[current])
        done.add(current)
        for other, required in needs.items():
            if other not in done and other not in ready and current in required and required <= done:
                heapq.heappush(ready, other)
    cyclic = sorted((by_id[i] for i in by_id if i not in done), key=lambda s: s.id)
    return ordered, cyclic


def _apply(root: Path, spec: PatchSpec, applied: frozenset[str], present: list[PatchSpec | str]) -> PatchResult:
    missing = [r for r in spec.requires if r not in applied]
    if missing:
        return NotApplicable(patch_id=spec.id, reason=f"requires {', '.join(missing)}, which is not applied")
    clash = blocking(spec, present)
    if clash:
        return NotApplicable(patch_id=spec.id, reason=f"conflicts with {', '.join(clash)}, which is applied")

    scopes: dict[str, set[str] | None] = {}
    for target in spec.targets:
        path, symbol = split_target(target)
        if symbol is None:
            scopes[path] = None
        elif path not in scopes or scopes[path] is not None:
            scopes.setdefault(path, set()).add(symbol)  # type: ignore[union-attr]

    outcomes: dict[str, tuple[str, FileOutcome]] = {}
    for path in sorted(scopes):
        file = _inside(root, path)
        if file is None:
            return Failed(patch_id=spec.id, error=f"target {path!r} is not a relative path inside the repository")
        if not file.is_file():
            return NotApplicable(patch_id=spec.id, reason=f"target file {path} does not exist")
        raw = file.read_bytes()
        try:
            source = decode_source(raw)
        except UnicodeError as e:
            return Failed(patch_id=spec.id, error=f"{path} cannot be decoded as its coding line (or UTF-8) says: {e}")
        outcomes[path] = (source, _outcome(spec, source, scopes[path]))

    broken = [f"{path}: {o.error}" for path, (_, o) in outcomes.items() if isinstance(o, Broken)]
    if broken:
        return Failed(patch_id=spec.id, error="; ".join(broken))
    rewritten = {path: o for path, (_, o) in outcomes.items() if isinstance(o, Rewritten)}
    if not rewritten:
        reasons = [f"{path}: {o.reason}" for path, (_, o) in outcomes.items() if isinstance(o, Declined)]
        return NotApplicable(patch_id=spec.id, reason="; ".join(reasons))
    _write_all({_inside(root, path): outcome.code for path, outcome in sorted(rewritten.items())})  # type: ignore[misc]
    return Applied(
        patch_id=spec.id,
        changed_files=tuple(sorted(rewritten)),
        added_imports=tuple(f"{path}: {imp}" for path, o in sorted(rewritten.items()) for imp in o.added_imports),
        symbols=tuple(f"{path}::{symbol}" for path, o in sorted(rewritten.items()) for symbol in o.symbols),
    )


def _outcome(spec: PatchSpec, source: str, scope: set[str] | None) -> FileOutcome:
    if spec.kind == "replacement":
        assert spec.replacement is not None and scope is not None and len(scope) == 1
        return replace_definition(source, next(iter(scope)), spec.replacement)
    assert spec.codemod is not None
    outcome = run_codemod(spec.codemod, source, scope=scope)
    if isinstance(outcome, Declined) and scope:
        missing = _missing_symbols(source, scope)
        if missing:  # say the likelier reason first: the target itself is not there
            return Declined(reason=f"no definition named {', '.join(missing)} in this file; {outcome.reason}")
    return outcome


def _missing_symbols(source: str, scope: set[str]) -> list[str]:
    try:
        defined = definitions(cst.parse_module(source))
    except cst.ParserSyntaxError:
        return []
    return sorted(repr(symbol) for symbol in scope if symbol not in defined)


def _inside(root: Path, path: str) -> Path | None:
    """``root / path`` when ``path`` is a relative POSIX path that stays inside ``root``
    (symbolic links included: a link pointing out of the repository is refused)."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path:
        return None
    file = root.joinpath(*pure.parts)
    if not file.resolve().is_relative_to(root.resolve()):
        return None
    return file


def _write_all(files: dict[Path, str]) -> None:
    """Replace every file's content, keeping permissions: all new contents are written
    to temporary files first, then renamed into place, so a failed write leaves no file half done."""
    staged: list[tuple[str, Path]] = []
    try:
        for file, code in files.items():
            fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".tmp")
            staged.append((tmp, file))
            with os.fdopen(fd, "wb") as handle:
                handle.write(encode_source(code))
            os.chmod(tmp, file.stat().st_mode & 0o7777)
        for tmp, file in staged:
            os.replace(tmp, file)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
