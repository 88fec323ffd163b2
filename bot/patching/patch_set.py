"""Apply a set of patch specs to a working tree, in place, without ever raising.

A set is applied in one canonical order (requirements first, then by id), so the
same set gives the same bytes whichever order the search listed it in. Conflicts
(:mod:`infrarsi.conflicts`) and missing requirements are settled before anything is touched; a set whose
result is not exactly every applied member's own change is refused
(:mod:`bot.patching.conflicts`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from bot.patching.conflicts import apply_set
from bot.patching.one_patch import apply_patch, canonical_order
from bot.patching.results import Applied, Failed, NotApplicable, PatchResult
from infrarsi.conflicts import blocking
from infrarsi.patches import PatchSpec


def apply_patches(root: Path, specs: Iterable[PatchSpec]) -> tuple[PatchResult, ...]:
    """Apply a set of patches in canonical order; one result per patch, in that order.

    Two patches in the set that conflict (:mod:`infrarsi.conflicts`: both decide or
    change the same thing, or either names the other) are both
    NotApplicable: the set is inconsistent and choosing a winner would make the
    outcome depend on something other than the set. A patch whose requirement is
    absent or did not apply is NotApplicable too. A set whose result is not
    exactly every applied member's own change is refused and the files restored.
    """
    listed = list(specs)
    try:
        if len({s.id for s in listed}) > 1:
            return apply_set(Path(root), listed, _apply_all)
        return _apply_all(Path(root), listed)
    except Exception as e:  # noqa: BLE001
        return tuple(Failed(patch_id=s.id, error=f"{type(e).__name__}: {e}") for s in listed)


def _apply_all(root: Path, specs: list[PatchSpec]) -> tuple[PatchResult, ...]:
    results: dict[str, PatchResult] = {}
    unique: dict[str, PatchSpec] = {}
    for spec in sorted(specs, key=lambda s: (s.id, s.digest())):
        if spec.id in unique and unique[spec.id].digest() != spec.digest():
            results[spec.id] = NotApplicable(patch_id=spec.id, reason="two different patches share this id")
        unique.setdefault(spec.id, spec)
    ids = set(unique)
    ordered, cyclic = canonical_order(unique.values())
    for spec in cyclic:
        results.setdefault(spec.id, NotApplicable(patch_id=spec.id, reason="its requirements form a cycle"))
    for spec in ordered:
        clash = sorted(blocking(spec, (other for other in unique.values() if other.id != spec.id)))
        if clash:
            results.setdefault(spec.id, NotApplicable(patch_id=spec.id,
                                                      reason=f"conflicts with {', '.join(clash)} in the same set"))
    applied: dict[str, PatchSpec] = {}
    for spec in ordered:
        if spec.id in results:
            continue
        absent = sorted(r for r in spec.requires if r not in ids)
        if absent:
            results[spec.id] = NotApplicable(patch_id=spec.id, reason=f"requires {', '.join(absent)}, "
                                             "which is not in this set")
            continue
        result = apply_patch(root, spec, applied=applied)
        results[spec.id] = result
        if isinstance(result, Applied):
            applied[spec.id] = spec
    order = [s.id for s in ordered] + [s.id for s in cyclic]
    return tuple(results[i] for i in order)
