""":class:`GitWorkspace`: the :class:`infrarsi.seams.workspace.Workspace` of one repository, over pygit2.

A thin binding of the repository's path to the functions of ``bot.workspace``
(worktrees, commits, refs, trees, remotes); each call opens its own
repository, so one instance may be shared by parallel trials.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.workspace import commits, refs, remotes, trees
from bot.workspace.identity import BOT_IDENTITY, BotIdentity
from bot.workspace.outside_git import outside_git
from bot.workspace.worktrees import Worktree, create_trial_worktree, remove_trial_worktree
from infrarsi.seams.workspace import CommitInfo, TrialTree

__all__ = ["GitWorkspace"]


@dataclass(frozen=True, slots=True)
class GitWorkspace:
    """The repository holding ``path`` (its main working tree is :attr:`root`)."""

    path: Path
    identity: BotIdentity = BOT_IDENTITY

    @property
    def root(self) -> Path:
        return refs.main_repository_dir(self.path)

    def create_worktree(self, *, base: str, run_id: str, trial_no: int) -> Worktree:
        return create_trial_worktree(self.path, base=base, run_id=run_id, trial_no=trial_no)

    def changed_files(self, tree: Path, base: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
        return trees.changed_files(tree, base)

    def commit_trial(self, tree: Path, *, message: str, trailers: Mapping[str, str]) -> str:
        return commits.commit_worktree(tree, message=message, author=self.identity, trailers=trailers)

    def remove_worktree(self, tree: TrialTree, *, keep_branch: bool = True) -> None:
        if not isinstance(tree, Worktree):
            raise TypeError(f"{tree!r} was not created by this workspace")
        remove_trial_worktree(tree, keep_branch=keep_branch)

    def outside_git(self) -> dict[str, str]:
        return outside_git(self.path)

    def head_branch(self) -> str | None:
        return refs.head_branch(self.path)

    def head_commit(self) -> str:
        return commits.repo_head_commit(self.path)

    def branch_tip(self, branch: str) -> str | None:
        return refs.branch_tip(self.path, branch)

    def set_branch(self, branch: str, sha: str) -> None:
        refs.set_branch(self.path, branch, sha)

    def has_commit(self, sha: str) -> bool:
        return refs.has_commit(self.path, sha)

    def commit_info(self, revision: str) -> CommitInfo:
        return refs.commit_info(self.path, revision)

    def merge_base(self, a: str, b: str) -> str | None:
        return refs.merge_base(self.path, a, b)

    def commits_since(self, head: str, base: str) -> list[CommitInfo]:
        return refs.commits_since(self.path, head, base)

    def diff_to_parent(self, commit: str) -> tuple[str, str] | None:
        return trees.diff_to_parent(self.path, commit)

    def list_files(self, commit: str | None) -> dict[str, str]:
        return trees.list_files(self.path, commit)

    def read_blob(self, blob: str) -> bytes:
        return trees.read_blob(self.path, blob)

    def export_tree(self, treeish: str, directory: Path) -> None:
        trees.export_tree(self.path, treeish, directory)

    def merge_change(self, change: str, onto: str) -> str:
        return trees.merge_change(self.path, change, onto)

    def commit_files(self, *, tree: str | None, files: Mapping[str, bytes], parents: Sequence[str],
                     message: str) -> tuple[str, str]:
        return trees.commit_files(self.path, tree=tree, files=files, parents=parents, message=message,
                                  identity=self.identity)

    def fetch_branches(self, remote: str, branches: Sequence[str]) -> None:
        remotes.fetch_branches(self.path, remote, branches)

    def push(self, remote: str, refspecs: Sequence[str]) -> dict[str, str]:
        return remotes.push(self.path, remote, refspecs)
