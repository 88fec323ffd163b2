"""What each patch claims to change, where two claims overlap, and whether a set kept every claim.

A patch's *claim* is what it changes when applied alone to the base tree: every
changed unit (a definition by qualified name, a module's own statements, a
whole non-Python file, as the scope audit cuts files) with its code after. Two
claims overlap when they change the same symbol (or one's changed symbol is
inside, or around, the other's), whoever wrote the patches. Claims need the
repo's source, so they are taken here; whether an overlap makes two patches
conflict is the one conflict rule's call (:mod:`infrarsi.conflicts`, which also
weighs what the patches decide), handed the overlaps as data. A set of patches
is applied only when it yields exactly the code every member claims; a patch
that silently overwrites another's change (a replacement of the definition a
codemod just rewrote) makes the set refused, never a tree whose label claims a
change that is not in it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from bot.patching.audit import unit_codes
from bot.patching.one_patch import apply_patch, canonical_order
from bot.patching.results import Applied, Failed, NotApplicable, PatchResult
from bot.patching.symbols import FILE, MODULE, covers, split_target
from infrarsi.conflicts import counted_overlaps, resolve
from infrarsi.patches import PatchSpec

Unit = tuple[str, str]  # (path, symbol); symbol is a qualified name, "<module>" or "<file>"


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """What ``patch_id`` changes on its own: each changed unit's code after (None: the unit is gone).

    ``written`` are the definitions the patch replaces whole (a replacement's target): anything
    inside them is the patch's, even where its new code happens to equal the old."""

    patch_id: str
    units: Mapping[Unit, str | None] = field(default_factory=dict)
    written: tuple[Unit, ...] = ()

    @property
    def symbols(self) -> tuple[str, ...]:
        """``path::symbol`` of every unit it changes, sorted (what a report lists under it)."""
        return tuple(sorted(f"{p}::{s}" for p, s in self.units))

    @property
    def region(self) -> frozenset[Unit]:
        return frozenset(self.units) | frozenset(self.written)


def _plain(symbol: str) -> str:
    return symbol.split("#", 1)[0]


def _touch(a: str, b: str) -> bool:
    """Whether two units of one file overlap: the same unit, or a definition and one inside it."""
    if FILE in (a, b):
        return True
    if MODULE in (a, b):
        return a == b
    a, b = _plain(a), _plain(b)
    return covers(a, b) or covers(b, a)


def shared(a: Claim, b: Claim) -> list[str]:
    """The symbols both claims change (empty: they commute). Two patches that make the module's own
    statements identical (the same import added) do not conflict there."""
    out: set[str] = set()
    for path_a, sym_a in a.region:
        for path_b, sym_b in b.region:
            if path_a != path_b or not _touch(sym_a, sym_b):
                continue
            if sym_a == sym_b == MODULE and a.units.get((path_a, MODULE)) == b.units.get((path_b, MODULE)):
                continue
            out.add(f"{path_a}::{min(sym_a, sym_b, key=len)}" if sym_a != FILE else path_a)
    return sorted(out)


def derived_conflicts(specs: Sequence[PatchSpec], claims: Mapping[str, Claim]) -> dict[str, dict[str, list[str]]]:
    """patch id → {other id: the symbols both change} for every pair of ``specs`` whose claims overlap and
    that the conflict rule counts (one requiring the other is made to stack): the rule's ``overlaps``."""
    ids = sorted(s.id for s in specs if s.id in claims)
    found: dict[str, dict[str, list[str]]] = {}
    for n, a in enumerate(ids):
        for b in ids[n + 1:]:
            both = shared(claims[a], claims[b])
            if both:
                found.setdefault(a, {})[b] = both
                found.setdefault(b, {})[a] = both
    return counted_overlaps(specs, found)


# -- claims -------------------------------------------------------------------------

def _read(root: Path, paths: Iterable[str]) -> dict[str, bytes]:
    out = {}
    for path in paths:
        file = root / path
        if file.is_file() and not file.is_symlink():
            out[path] = file.read_bytes()
    return out


def _spec_files(specs: Iterable[PatchSpec]) -> set[str]:
    return {split_target(t)[0] for s in specs for t in s.targets}


@lru_cache(maxsize=64)
def _codes(data: bytes) -> Mapping[str, str] | None:
    """:func:`unit_codes` of a file's bytes, memoised: a set's base files are cut once per claim otherwise."""
    return unit_codes(data.decode("utf-8", "replace"))


def _changed_units(path: str, before: bytes | None, after: bytes | None) -> dict[Unit, str | None]:
    if before == after:
        return {}
    old = _codes(before) if before is not None and path.endswith(".py") else None
    new = _codes(after) if after is not None and path.endswith(".py") else None
    if old is None or new is None:
        return {(path, FILE): after.decode("utf-8", "replace") if after is not None else None}
    return {(path, name): new.get(name) for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)}


def claim_from(patch_id: str, before: Mapping[str, bytes], after: Mapping[str, bytes],
               spec: PatchSpec | None = None) -> Claim:
    """The claim of a patch that turned ``before`` into ``after`` (only the files it may write)."""
    units: dict[Unit, str | None] = {}
    for path in sorted(set(before) | set(after)):
        units.update(_changed_units(path, before.get(path), after.get(path)))
    written: tuple[Unit, ...] = ()
    if spec is not None and spec.kind == "replacement":
        path, symbol = split_target(spec.targets[0])
        written = ((path, symbol or FILE),)
    return Claim(patch_id=patch_id, units=units, written=written)


def scratch_apply(files: Mapping[str, bytes], specs: Sequence[PatchSpec]
                  ) -> tuple[tuple[PatchResult, ...], dict[str, bytes], dict[str, bytes]]:
    """Apply ``specs`` in order (the last one alone being judged, the others its requirements) to a scratch
    copy of ``files``: (results, the files before the last one, after it). The scratch tree holds only
    the files the patches may write: a patch reads and writes nothing else."""
    with tempfile.TemporaryDirectory(prefix="infrarsi-claim-") as tmp:
        root = Path(tmp)
        for path, data in files.items():
            dest = root / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        results: list[PatchResult] = []
        applied: dict[str, PatchSpec] = {}
        before = dict(files)
        for n, spec in enumerate(specs):
            if n == len(specs) - 1:
                before = _read(root, files)
            result = apply_patch(root, spec, applied=applied)
            results.append(result)
            if isinstance(result, Applied):
                applied[spec.id] = spec
        return tuple(results), before, _read(root, files)


def claim_of(files: Mapping[str, bytes], spec: PatchSpec, requirements: Sequence[PatchSpec] = ()
             ) -> Claim | PatchResult:
    """What ``spec`` changes when applied alone (after its ``requirements``) to ``files``; its failing
    result when it does not apply there."""
    results, before, after = scratch_apply(files, [*requirements, spec])
    if not all(isinstance(r, Applied) for r in results):
        return next(r for r in reversed(results) if not isinstance(r, Applied))
    return claim_from(spec.id, before, after, spec)


@lru_cache(maxsize=64)
def _claim_memo(files: tuple[tuple[str, bytes], ...], spec: PatchSpec, requirements: tuple[PatchSpec, ...]
                ) -> Claim | PatchResult:
    """:func:`claim_of`, memoised: a search applies the same patches to the same base in trial after trial."""
    return claim_of(dict(files), spec, requirements)


# -- a set of patches -------------------------------------------------------------

def unkept(base: Mapping[str, bytes], after: Mapping[str, bytes], claims: Sequence[Claim]) -> list[tuple[str, str]]:
    """(patch id or "", why) for every unit where ``after`` is not ``base`` plus the claims (in the order
    given: a requirer's claim, made on top of its requirement's, comes later and wins); empty when kept."""
    expected: dict[Unit, tuple[str, str | None]] = {}
    for claim in claims:
        for unit, code in claim.units.items():
            expected[unit] = (claim.patch_id, code)
    wrong: list[tuple[str, str]] = []
    for path in sorted(set(base) | set(after)):
        got = _changed_units(path, base.get(path), after.get(path))
        mine = {u: v for u, v in expected.items() if u[0] == path}
        for unit in sorted(set(got) | set(mine)):
            where = path if unit[1] == FILE else f"{path}::{unit[1]}"
            if unit in mine and unit not in got:
                wrong.append((mine[unit][0], f"its change to {where} is not in the result"))
            elif unit not in mine:
                wrong.append(("", f"{where} changed, but no patch of the set claims that change"))
            elif got[unit] != mine[unit][1]:
                wrong.append((mine[unit][0], f"its change to {where} was overwritten in the result"))
    return wrong


def apply_set(root: Path, specs: Sequence[PatchSpec],
              apply_all: Callable[[Path, list[PatchSpec]], tuple[PatchResult, ...]]) -> tuple[PatchResult, ...]:
    """Apply a set so that the tree holds exactly every member's claimed change, or refuse it.

    Each member's claim is taken on a scratch copy first; members the conflict rule
    keeps apart (:mod:`infrarsi.conflicts`: claims that overlap, the same decision, a
    record's word) are not applied. After the rest is applied, a unit that is not what its claimant
    made of it alone refuses the set: the files are restored and the members say why.
    """
    root = Path(root)
    by_id = {s.id: s for s in specs}
    files = _spec_files(specs)
    base = _read(root, files)
    claims: dict[str, Claim] = {}
    for spec in by_id.values():
        needs = _requirements(spec, by_id)
        if needs is None:
            continue
        mine = {split_target(t)[0] for s in (*needs, spec) for t in s.targets}
        found = _claim_memo(tuple(sorted((p, d) for p, d in base.items() if p in mine)), spec, tuple(needs))
        if isinstance(found, Claim):
            claims[spec.id] = found
    conflicts = derived_conflicts(list(by_id.values()), claims)
    results = apply_all(root, resolve(specs, conflicts))
    results = tuple(_explain(r, conflicts) for r in results)
    applied = [r.patch_id for r in results if isinstance(r, Applied)]
    order = [r.patch_id for r in results]
    wrong = unkept(base, _read(root, files), [claims[i] for i in order if i in claims and i in applied]) \
        if len(applied) > 1 else []
    if not wrong:
        return results
    _restore(root, base, files)
    why = "; ".join(f"{pid or 'the set'}: {w}" for pid, w in wrong)
    blamed = {pid for pid, _ in wrong if pid} or set(applied)
    return tuple((Failed(patch_id=r.patch_id, error=f"refused with the rest of its set: {why}")
                  if r.patch_id in blamed else
                  NotApplicable(patch_id=r.patch_id, reason=f"not applied: its set was refused ({why})"))
                 if isinstance(r, Applied) else r for r in results)


def _requirements(spec: PatchSpec, by_id: Mapping[str, PatchSpec]) -> list[PatchSpec] | None:
    """The patches ``spec`` requires, transitively, in an order they apply in; None if one is absent."""
    closure: dict[str, PatchSpec] = {}
    todo = list(spec.requires)
    while todo:
        r = todo.pop()
        if r in closure:
            continue
        if r not in by_id or r == spec.id:
            return None
        closure[r] = by_id[r]
        todo += by_id[r].requires
    ordered, cyclic = canonical_order(closure.values())
    return None if cyclic else ordered


def _explain(result: PatchResult, conflicts: Mapping[str, Mapping[str, list[str]]]) -> PatchResult:
    """Name the shared symbols in a derived conflict's reason."""
    mine = conflicts.get(result.patch_id)
    if not mine or not isinstance(result, NotApplicable) or "conflicts with" not in result.reason:
        return result
    detail = "; ".join(f"{other} also changes {', '.join(symbols)}" for other, symbols in sorted(mine.items()))
    return NotApplicable(patch_id=result.patch_id, reason=f"{result.reason} ({detail})")


def _restore(root: Path, base: Mapping[str, bytes], files: Iterable[str]) -> None:
    for path in files:
        file = root / path
        if path in base:
            if not file.is_file() or file.read_bytes() != base[path]:
                mode = file.stat().st_mode & 0o7777 if file.exists() else None
                file.write_bytes(base[path])
                if mode is not None:
                    os.chmod(file, mode)
        elif file.is_file():
            file.unlink()


__all__ = ["Claim", "apply_set", "claim_from", "claim_of", "derived_conflicts", "scratch_apply", "shared",
           "unkept"]
