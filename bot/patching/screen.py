"""Every proposed patch is judged when it is proposed, not when a candidate first stacks it.

Each patch (a catalog codemod or a model's replacement) is applied alone to a
scratch copy of the files it may write, taken from the base commit the trials
start from, and the result is audited against the contract's scope. A patch
that does not apply, or changes a locked file or a symbol outside ``editable``,
is rejected once with its reason: it never enters the search space, so no
candidate spends a trial on it. A patch that adds something a speed patch never
needs (:mod:`bot.patching.suspicious`) is rejected as *quarantined* for a person,
with each line named. What each accepted patch changes (its
:class:`~bot.patching.conflicts.Claim`) is handed to the one conflict rule
(:mod:`infrarsi.conflicts`), and every conflict it finds among the accepted
patches (the same symbol changed, the same thing decided) is written into their
``conflicts_with``, so that the search never stacks two of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.patching.audit import audit_tree
from bot.patching.conflicts import Claim, claim_from, derived_conflicts, scratch_apply
from bot.patching.one_patch import canonical_order
from bot.patching.results import Applied, Failed, NotApplicable
from bot.patching.suspicious import quarantine_reason, scan_tree
from bot.patching.symbols import split_target
from infrarsi.conflicts import resolve
from infrarsi.contract.model import Scope
from infrarsi.patches import PatchSpec
from infrarsi.seams.workspace import Workspace
from infrarsi.trial_record import QUARANTINED

Reader = Callable[[Iterable[str]], dict[str, bytes]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Screening:
    """Accepted patches (``conflicts_with`` resolved by :mod:`infrarsi.conflicts`), their claims, and the rejected
    ones."""

    accepted: tuple[PatchSpec, ...] = ()
    claims: Mapping[str, Claim] = field(default_factory=dict)
    rejected: Mapping[str, str] = field(default_factory=dict)  # patch id → why

    @property
    def quarantined(self) -> dict[str, str]:
        """patch id → the findings it was quarantined for (``quarantined for review: train.py:41: ...``)."""
        return {pid: why for pid, why in self.rejected.items() if why.startswith(QUARANTINED)}

    def conflicts(self) -> dict[str, list[str]]:
        """patch id → the ids it conflicts with (the rule's answer, resolved)."""
        return {s.id: list(s.conflicts_with) for s in self.accepted if s.conflicts_with}


def screen_one(read: Reader, spec: PatchSpec, scope: Scope, requirements: Sequence[PatchSpec] = ()
               ) -> Claim | str:
    """``spec``'s claim on the base tree, or why it is rejected (does not apply, leaves the scope, is
    quarantined)."""
    paths = {split_target(t)[0] for s in (*requirements, spec) for t in s.targets}
    files = read(paths)
    results, before, after = scratch_apply(files, [*requirements, spec])
    for result in results:
        if isinstance(result, NotApplicable):
            return f"does not apply to the base tree: {result.reason}"
        if isinstance(result, Failed):
            return f"does not apply to the base tree: {result.error}"
    audit = audit_tree(before, after, editable=scope.editable, locked=scope.locked,
                       allow_imports=scope.allow_imports)
    findings = scan_tree(before, after, [c.path for c in audit.changes])
    if findings:
        return quarantine_reason(findings, audit.violations)
    if not audit.ok:
        return "outside the editable scope: " + "; ".join(str(v) for v in audit.violations)
    assert all(isinstance(r, Applied) for r in results)
    return claim_from(spec.id, before, after, spec)


def screen_patches(read: Reader, specs: Sequence[PatchSpec], scope: Scope, *,
                   claims: Mapping[str, Claim] | None = None) -> Screening:
    """Judge ``specs`` on the base tree ``read`` gives; ``claims`` already taken (an earlier round) are reused."""
    known = dict(claims or {})
    by_id = {s.id: s for s in specs}
    rejected: dict[str, str] = {}
    for spec in sorted(by_id.values(), key=lambda s: s.id):
        if spec.id in known:
            continue
        missing = [r for r in spec.requires if r not in by_id]
        if missing:
            rejected[spec.id] = f"requires {', '.join(missing)}, which is not a known patch"
            continue
        found = screen_one(read, spec, scope, [by_id[r] for r in _closure(spec, by_id)])
        if isinstance(found, Claim):
            known[spec.id] = found
        else:
            rejected[spec.id] = found
    kept = [s for s in by_id.values() if s.id not in rejected and all(r not in rejected for r in s.requires)]
    for s in by_id.values():
        if s.id not in rejected and s not in kept:
            rejected[s.id] = f"requires {', '.join(r for r in s.requires if r in rejected)}, which was rejected"
    claims_kept = {s.id: known[s.id] for s in kept if s.id in known}
    accepted = resolve(kept, derived_conflicts(kept, claims_kept))
    return Screening(accepted=tuple(sorted(accepted, key=lambda s: s.id)), claims=claims_kept, rejected=rejected)


def _closure(spec: PatchSpec, by_id: Mapping[str, PatchSpec]) -> list[str]:
    found: dict[str, PatchSpec] = {}
    todo = list(spec.requires)
    while todo:
        r = todo.pop()
        if r not in found and r in by_id and r != spec.id:
            found[r] = by_id[r]
            todo += by_id[r].requires
    ordered, _ = canonical_order(found.values())
    return [s.id for s in ordered]


def commit_reader(workspace: Workspace, commit: str) -> Reader:
    """Files of ``commit`` (the trials' base), read through the repo's workspace: the working tree may differ
    from it."""
    blobs = workspace.list_files(commit)

    def read(paths: Iterable[str]) -> dict[str, bytes]:
        return {p: workspace.read_blob(blobs[p]) for p in paths if p in blobs}

    return read


def dir_reader(root: Path) -> Reader:
    """Files of a directory (tests, and repos that are not git)."""
    def read(paths: Iterable[str]) -> dict[str, bytes]:
        return {p: (root / p).read_bytes() for p in paths if (root / p).is_file()}

    return read
