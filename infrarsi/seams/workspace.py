"""The workspace seam: the training repository as git sees it — trial worktrees, commits, branches, remotes.

``bot.workspace`` implements it with pygit2 (:class:`bot.workspace.GitWorkspace`); no module
outside ``bot/workspace/`` imports pygit2 (``tests/test_layout.py``). The stages reach git only
through the ``Workspace`` they are given: the CLI opens one on the repository and passes it
down, and a module of ``bot/stages/`` imports from ``bot.workspace`` only what opens no
repository (branch names, errors, the bot's identity, data links; ``tests/test_layout_rules.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["CommitInfo", "TrialTree", "Workspace"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CommitInfo:
    """The parts of a commit the stages look at (ids are full hex)."""

    sha: str
    parents: tuple[str, ...]
    tree: str
    author_name: str
    author_email: str
    committer_email: str


class TrialTree(Protocol):
    """A live trial worktree: ``path`` checked out on its own new ``branch`` at ``base_commit``."""

    @property
    def path(self) -> Path: ...

    @property
    def branch(self) -> str: ...

    @property
    def base_commit(self) -> str: ...


@runtime_checkable
class Workspace(Protocol):
    """One training repository (``root``: its main working tree) as the stages use it.

    Call order. A trial: ``create_worktree`` → the candidate's patches are
    written into ``tree.path`` → ``changed_files`` (the scope audit reads them)
    → ``commit_trial`` → the executor runs the tree → ``remove_worktree``
    (the branch ``infrarsi/<run>/<n>`` stays as the record); the run's base is
    ``head_commit``, and proposed patches are screened on it through
    ``list_files``/``read_blob``; ``init`` drafts ``[data] paths`` from
    ``outside_git`` (and ``check`` and a crashed trial read it too). A promotion: the forge fetches the branches →
    ``merge_change`` of the winner's trial commit onto the base →
    ``export_tree`` (knobs and lock are written into the export) →
    ``commit_files`` → ``set_branch`` → the forge pushes. ``report`` reads
    ``diff_to_parent``; ``apply`` and ``promote`` read ``head_branch``,
    ``branch_tip``, ``merge_base`` and ``commits_since``, and commit the run's
    record (``commit_files``) and read it back and the base's CODEOWNERS
    (``list_files``/``read_blob``). No stage calls ``fetch_branches`` or
    ``push``: a forge fetches and pushes with its own credentials.

    Ownership. A worktree belongs to whoever created it until it is removed
    (``infrarsi gc`` removes those of dead runs); branches outlive worktrees.
    Only the refs a method names move: the user's checkout, index and other
    branches are never touched, and nothing is ever pushed to a base branch.
    Records returned (:class:`CommitInfo`, trial trees) are frozen snapshots.

    Thread safety. Every method may be called from many threads at once
    (parallel trials): no method keeps a repository object across calls, ref
    updates are serialised per repository within the process and retried while
    another process holds git's lock file.

    Raises (``bot.workspace.errors``, all :class:`GitLayerError`, each message
    saying what to do): ``RevisionNotFoundError`` for a revision that does not
    resolve, ``StaleBranchError``/``StaleWorktreeError`` when a trial's branch
    or directory is left from a killed run, ``WorktreeError``/``CommitError``
    when git refuses, ``MergeConflictError`` naming the conflicting paths,
    ``RemoteError`` when a transfer fails. Queries (``branch_tip``,
    ``has_commit``, ``merge_base``, ``head_branch``) answer None/False instead
    of raising; ``fetch_branches`` is best effort and never raises.
    """

    @property
    def root(self) -> Path: ...

    # -- trial worktrees -------------------------------------------------------------------------------
    def create_worktree(self, *, base: str, run_id: str, trial_no: int) -> TrialTree:
        """A new worktree on a new branch ``infrarsi/<run_id>/<trial_no>`` at ``base``."""
        ...

    def changed_files(self, tree: Path, base: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
        """(before, after) contents of every path of ``tree`` that differs from ``base``; ignored files skipped."""
        ...

    def commit_trial(self, tree: Path, *, message: str, trailers: Mapping[str, str]) -> str:
        """Commit everything in the worktree on its branch (an empty change commits too); the commit id."""
        ...

    def remove_worktree(self, tree: TrialTree, *, keep_branch: bool = True) -> None: ...

    def outside_git(self) -> dict[str, str]:
        """``{path: "ignored" | "untracked"}``: what git does not track where the workspace was opened, relative
        to it, listed as ``git ls-files --others --directory`` lists it (a wholly ignored or untracked folder is
        one entry); ignored entries first, each kind sorted. What a trial's fresh worktree will not have."""
        ...

    # -- branches and history --------------------------------------------------------------------------
    def head_branch(self) -> str | None:
        """The branch HEAD is on where the workspace was opened; None when it is detached or unborn."""
        ...

    def head_commit(self) -> str:
        """The commit HEAD points to where the workspace was opened; ``RevisionNotFoundError`` when unborn."""
        ...

    def branch_tip(self, branch: str) -> str | None: ...

    def set_branch(self, branch: str, sha: str) -> None:
        """Create or move ``branch`` to ``sha`` (no checkout)."""
        ...

    def has_commit(self, sha: str) -> bool: ...

    def commit_info(self, revision: str) -> CommitInfo: ...

    def merge_base(self, a: str, b: str) -> str | None: ...

    def commits_since(self, head: str, base: str) -> list[CommitInfo]:
        """Commits reachable from ``head`` and not from ``base``, newest first."""
        ...

    # -- trees without a worktree ----------------------------------------------------------------------
    def diff_to_parent(self, commit: str) -> tuple[str, str] | None:
        """(first parent id, unified diff) of ``commit``; None when it is missing or has no parent."""
        ...

    def list_files(self, commit: str | None) -> dict[str, str]:
        """``{path: blob id}`` of every file in ``commit``'s tree; ``{}`` for None."""
        ...

    def read_blob(self, blob: str) -> bytes: ...

    def export_tree(self, treeish: str, directory: Path) -> None:
        """Write a commit's or tree's files into ``directory``."""
        ...

    def merge_change(self, change: str, onto: str) -> str:
        """The tree id of ``onto`` with ``change``'s own diff merged in (three-way)."""
        ...

    def commit_files(self, *, tree: str | None, files: Mapping[str, bytes], parents: Sequence[str],
                     message: str) -> tuple[str, str]:
        """A commit of ``tree`` with ``files`` written over it, on no branch: (commit id, tree id)."""
        ...

    # -- remotes ---------------------------------------------------------------------------------------
    def fetch_branches(self, remote: str, branches: Sequence[str]) -> None:
        """Best effort: ``branches`` into ``refs/remotes/<remote>/``."""
        ...

    def push(self, remote: str, refspecs: Sequence[str]) -> dict[str, str]:
        """Push to a remote name, URL or path; ``{ref: reason}`` of the refs the remote refused."""
        ...
