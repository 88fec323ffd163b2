"""``infrarsi gc``: clean up the worktrees and branches of finished runs; and a finished run's own pruning.

A run that ends normally removes its worktrees and then its trial branches
(:func:`prune_run`), keeping the branches it names (the verified winner's, which
the report and the promotion read); the journal keeps every trial. What is left
of older runs, and everything a *killed* run left behind (a live-looking worktree
directory, its metadata, its branch), is removed here once the run is no longer
active.

Safety rules, in order: a branch in ``protected_branches`` (an open pull
request's head, ``infrarsi/promote/...``, ``infrarsi/experience``) and the branch
checked out in the main working tree are never deleted; a worktree whose owner
process is still alive is never removed; a directory that is not a git
worktree is never deleted; only ``infrarsi/<run>/<n>`` branches are candidates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pygit2

from bot.workspace._access import main_workdir, open_main_repository, worktree_admin_dir
from bot.workspace.errors import GitLayerError
from bot.workspace.naming import (
    BRANCH_PREFIX,
    WORKTREE_NAME_PREFIX,
    TrialId,
    parse_dirname,
    parse_trial_branch,
    parse_worktree_name,
)
from bot.workspace.owner import Owner, read_owner
from bot.workspace.worktrees import force_rmtree, delete_branch, discard_worktree
from infrarsi.rundir import worktrees_dir

__all__ = [
    "TrialWorktreeInfo",
    "RemovedWorktree",
    "KeptItem",
    "GcReport",
    "find_trial_worktrees",
    "collect_garbage",
    "PruneReport",
    "prune_run",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialWorktreeInfo:
    """An InfraRSI worktree registered in the repository, and how healthy it is.

    ``is_prunable`` is libgit2's verdict: the directory (or its ``.git`` link)
    is gone. ``owner_alive`` is ``False`` when the creating process has exited,
    e.g. a run killed before its cleanup ran, and also when no owner is known.
    """

    name: str
    path: Path
    branch: str | None
    run_id: str | None
    trial_no: int | None
    is_prunable: bool
    owner: Owner | None
    owner_alive: bool

    @property
    def is_stale(self) -> bool:
        """Dead for sure: directory gone, or the recorded owner process died."""
        return self.is_prunable or (self.owner is not None and not self.owner_alive)


@dataclass(frozen=True, kw_only=True, slots=True)
class RemovedWorktree:
    name: str
    path: Path
    branch: str | None
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class KeptItem:
    kind: Literal["worktree", "branch", "directory"]
    name: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class GcReport:
    """What gc removed (or, with ``dry_run``, would remove) and what it kept, with why."""

    dry_run: bool
    removed_worktrees: tuple[RemovedWorktree, ...]
    removed_directories: tuple[Path, ...]
    deleted_branches: tuple[str, ...]
    kept: tuple[KeptItem, ...]

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        lines = [
            f"{verb} {len(self.removed_worktrees)} worktree(s), "
            f"{len(self.removed_directories)} orphan director(y/ies), "
            f"{len(self.deleted_branches)} branch(es); kept {len(self.kept)}"
        ]
        lines += [f"  worktree {w.name} ({w.path}): {w.reason}" for w in self.removed_worktrees]
        lines += [f"  directory {d}" for d in self.removed_directories]
        lines += [f"  branch {b}" for b in self.deleted_branches]
        lines += [f"  kept {k.kind} {k.name}: {k.reason}" for k in self.kept]
        return "\n".join(lines)


def find_trial_worktrees(repo_path: Path | str) -> list[TrialWorktreeInfo]:
    """Every registered worktree that belongs to InfraRSI.

    A worktree is InfraRSI's if its branch starts with ``infrarsi/``, its
    directory lives under ``<repo>/.infrarsi/worktrees``, or InfraRSI named it.
    """
    repo = open_main_repository(repo_path)
    root = worktrees_dir(main_workdir(repo))
    found = []
    for name in repo.list_worktrees():
        try:
            worktree = repo.lookup_worktree(name)
            path = Path(worktree.path)
            prunable = worktree.is_prunable
        except (KeyError, pygit2.GitError) as exc:
            log.warning("cannot read worktree %s: %s", name, exc)
            continue
        admin = worktree_admin_dir(repo, name)
        branch = _head_branch(admin)
        under_root = _is_under(path, root)
        ours = (
            (branch is not None and branch.startswith(BRANCH_PREFIX))
            or under_root
            or name.startswith(WORKTREE_NAME_PREFIX)
        )
        if not ours:
            continue
        trial = _trial_of(branch, name, path if under_root else None)
        owner = read_owner(admin)
        found.append(
            TrialWorktreeInfo(
                name=name,
                path=path,
                branch=branch,
                run_id=trial.run_id if trial else None,
                trial_no=trial.trial_no if trial else None,
                is_prunable=prunable,
                owner=owner,
                owner_alive=owner is not None and owner.is_alive(),
            )
        )
    return found


def collect_garbage(
    repo_path: Path | str,
    *,
    active_runs: set[str] | frozenset[str] = frozenset(),
    protected_branches: set[str] | frozenset[str] = frozenset(),
    data_links: set[str] | frozenset[str] = frozenset(),
    dry_run: bool = False,
) -> GcReport:
    """Remove worktrees, orphan directories and trial branches of inactive runs.

    ``active_runs`` are run ids still in progress: their branches are kept, and
    their worktrees too unless provably dead (directory gone, owner killed).
    ``protected_branches`` (with or without ``refs/heads/``) are never deleted.
    ``data_links`` are the names in the worktrees directory that hold the links to
    data one level above the repository (a contract path ``../data``): shared by
    every trial, kept, and said so.
    With ``dry_run`` nothing is changed and the report says what would be.
    """
    repo = open_main_repository(repo_path)
    active = set(active_runs)
    protected = {b.removeprefix("refs/heads/") for b in protected_branches}
    head_branch = _head_branch(Path(repo.path))

    removed: list[RemovedWorktree] = []
    kept: list[KeptItem] = []
    busy_branches: set[str] = set()  # still checked out in a worktree we keep
    registered_paths: set[Path] = set()

    for info in find_trial_worktrees(repo_path):
        registered_paths.add(info.path.resolve())
        reason = _worktree_verdict(info, active, protected)
        if reason.startswith("keep:"):
            kept.append(KeptItem(kind="worktree", name=info.name, reason=reason[5:].strip()))
            if info.branch:
                busy_branches.add(info.branch)
            continue
        if not dry_run:
            try:
                discard_worktree(repo, name=info.name, path=info.path)
            except (GitLayerError, pygit2.GitError, OSError) as exc:
                kept.append(KeptItem(kind="worktree", name=info.name, reason=f"removal failed: {exc}"))
                if info.branch:
                    busy_branches.add(info.branch)
                continue
        removed.append(
            RemovedWorktree(name=info.name, path=info.path, branch=info.branch, reason=reason)
        )

    removed_dirs = _collect_orphan_dirs(repo, registered_paths, active, kept, data_links=data_links, dry_run=dry_run)

    deleted: list[str] = []
    for branch in sorted(repo.listall_branches(pygit2.enums.BranchType.LOCAL)):
        if not branch.startswith(BRANCH_PREFIX):
            continue
        why_keep = _branch_keep_reason(branch, active, protected, head_branch, busy_branches)
        if why_keep:
            kept.append(KeptItem(kind="branch", name=branch, reason=why_keep))
            continue
        if not dry_run:
            try:
                delete_branch(repo, branch)
            except pygit2.GitError as exc:  # e.g. checked out in a user's own worktree
                kept.append(KeptItem(kind="branch", name=branch, reason=f"deletion failed: {exc}"))
                continue
        deleted.append(branch)

    return GcReport(
        dry_run=dry_run,
        removed_worktrees=tuple(removed),
        removed_directories=tuple(removed_dirs),
        deleted_branches=tuple(deleted),
        kept=tuple(kept),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class PruneReport:
    """The trial branches of one run that :func:`prune_run` deleted, and those it left (each with why)."""

    run_id: str
    deleted: tuple[str, ...]
    left: tuple[KeptItem, ...]


def prune_run(repo_path: Path | str, run_id: str, *, keep: Mapping[str, str]) -> PruneReport:
    """Delete the trial branches ``infrarsi/<run_id>/<n>`` of a finished run, but those in ``keep`` (branch ->
    why it stays) and any still checked out (in the main tree or a worktree). The run's worktrees are already
    gone: each trial removes its own."""
    repo = open_main_repository(repo_path)
    checked_out = {b for b in (_head_branch(Path(repo.path)), *(i.branch for i in find_trial_worktrees(repo_path)))
                   if b}
    deleted: list[str] = []
    left: list[KeptItem] = []
    for branch in sorted(repo.listall_branches(pygit2.enums.BranchType.LOCAL)):
        trial = parse_trial_branch(branch)
        if trial is None or trial.run_id != run_id:
            continue
        why = keep.get(branch) or ("checked out" if branch in checked_out else None)
        if why is None:
            try:
                delete_branch(repo, branch)
            except pygit2.GitError as exc:
                why = f"deletion failed: {exc}"
        if why is None:
            deleted.append(branch)
        else:
            left.append(KeptItem(kind="branch", name=branch, reason=why))
    return PruneReport(run_id=run_id, deleted=tuple(deleted), left=tuple(left))


def _worktree_verdict(info: TrialWorktreeInfo, active: set[str], protected: set[str]) -> str:
    """A removal reason, or ``"keep: <reason>"``."""
    if info.is_prunable:
        return "directory is gone; pruned its metadata"
    if info.owner_alive and info.owner is not None:
        return f"keep: in use by a live process ({info.owner.describe()})"
    if info.branch in protected:
        return f"keep: branch {info.branch} is protected"
    dead_owner = info.owner is not None  # known owner, and (checked above) not alive
    if info.run_id in active:
        if dead_owner:
            assert info.owner is not None
            return f"owner process died ({info.owner.describe()}); run {info.run_id} left it behind"
        return f"keep: run {info.run_id} is active"
    if info.run_id is None:
        return "not attributable to any run and no live owner"
    if dead_owner:
        return f"run {info.run_id} is not active and its process is gone (killed run)"
    return f"run {info.run_id} is not active"


def _branch_keep_reason(
    branch: str,
    active: set[str],
    protected: set[str],
    head_branch: str | None,
    busy: set[str],
) -> str | None:
    trial = parse_trial_branch(branch)
    if branch in protected:
        return "protected"
    if trial is None:
        return "not a trial branch (infrarsi/<run>/<n>)"
    if branch == head_branch:
        return "checked out in the main working tree"
    if trial.run_id in active:
        return f"run {trial.run_id} is active"
    if branch in busy:
        return "checked out in a worktree that was kept"
    return None


def _collect_orphan_dirs(
    repo: pygit2.Repository,
    registered: set[Path],
    active: set[str],
    kept: list[KeptItem],
    *,
    data_links: set[str] | frozenset[str],
    dry_run: bool,
) -> list[Path]:
    """Directories under ``.infrarsi/worktrees`` that git no longer knows about.

    Left when metadata was pruned but the directory survived (a crash between
    the two, or ``git worktree prune`` run by hand on a moved directory). Only a
    directory holding a ``.git`` link file, or an empty one, is deleted.
    """
    root = worktrees_dir(main_workdir(repo))
    if not root.is_dir():
        return []
    removed = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.is_symlink() or child.resolve() in registered:
            continue
        if child.name in data_links:
            kept.append(KeptItem(kind="directory", name=str(child),
                                 reason=f"links to the contract's data path ../{child.name}, shared by every trial"))
            continue
        trial = parse_dirname(child.name)
        if trial is not None and trial.run_id in active:
            kept.append(KeptItem(kind="directory", name=str(child), reason=f"run {trial.run_id} is active"))
            continue
        if not ((child / ".git").is_file() or not any(child.iterdir())):
            kept.append(
                KeptItem(kind="directory", name=str(child), reason="not a git worktree; not deleting unknown data")
            )
            continue
        if not dry_run:
            try:
                force_rmtree(child)
            except OSError as exc:
                kept.append(KeptItem(kind="directory", name=str(child), reason=f"removal failed: {exc}"))
                continue
        removed.append(child)
    return removed


def _head_branch(git_dir: Path) -> str | None:
    """Short name of the branch HEAD names in ``git_dir`` (even if unborn); else ``None``.

    Reads the symbolic HEAD without resolving it, so it works for a worktree
    whose branch or directory is gone.
    """
    try:
        head = pygit2.Repository(str(git_dir)).lookup_reference("HEAD")
    except (KeyError, pygit2.GitError, OSError):
        return None
    if head.type != pygit2.enums.ReferenceType.SYMBOLIC:
        return None
    target = head.target
    assert isinstance(target, str)
    return target.removeprefix("refs/heads/")


def _trial_of(branch: str | None, name: str, dir_under_root: Path | None) -> TrialId | None:
    trial = parse_trial_branch(branch) if branch else None
    if trial is None:
        trial = parse_worktree_name(name)
    if trial is None and dir_under_root is not None:
        trial = parse_dirname(dir_under_root.name)
    return trial


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
