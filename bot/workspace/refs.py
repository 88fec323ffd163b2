"""Branches, refs and commit history of a repository on disk, by path.

What the stages ask of git outside a trial worktree: which branch HEAD is on,
where a branch points, moving the promotion branch, merge bases and who
committed what. Like the rest of ``bot.workspace`` every call opens its own
repository (libgit2 objects are not thread-safe) and ref updates go through
:func:`bot.workspace._access.ref_lock`.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from bot.workspace._access import main_workdir, open_main_repository, open_repository, ref_lock, retry_locked
from bot.workspace.errors import NotARepositoryError
from bot.workspace.worktrees import resolve_commit
from infrarsi.seams.workspace import CommitInfo

__all__ = ["CommitInfo", "branch_tip", "commits_since", "commit_info", "has_commit", "head_branch",
           "init_repository", "is_bare", "is_descendant", "is_git_repo", "main_repository_dir", "merge_base",
           "ref_tip", "remote_url", "repository_dir", "set_branch", "set_ref"]


def is_git_repo(path: Path | str) -> bool:
    """Whether ``path`` is inside a git repository."""
    return pygit2.discover_repository(str(path)) is not None


def init_repository(path: Path | str, *, bare: bool = False, initial_head: str = "main") -> Path:
    """Create an empty repository (``bare`` for a remote) with HEAD on ``initial_head``."""
    pygit2.init_repository(str(path), bare=bare, initial_head=initial_head)
    return Path(path)


def main_repository_dir(path: Path | str) -> Path:
    """The main working tree (or a bare repository's git dir) of the repository holding ``path``,
    also when ``path`` is inside a linked worktree."""
    return main_workdir(open_main_repository(path))


def repository_dir(path: Path | str) -> Path:
    """The working tree (or a bare repository's git dir) of the repository holding ``path``."""
    git = open_repository(path)
    return Path(git.workdir or git.path)


def is_bare(path: Path | str) -> bool:
    """Whether ``path`` itself is a bare repository; :class:`NotARepositoryError` when it is no repository."""
    try:
        return bool(pygit2.Repository(str(path)).is_bare)
    except pygit2.GitError:
        raise NotARepositoryError(path) from None


def head_branch(repo: Path | str) -> str | None:
    """The short name of the branch HEAD is on; None when HEAD is detached or unborn."""
    git = open_repository(repo)
    if git.head_is_unborn or git.head_is_detached:
        return None
    return git.head.shorthand


def ref_tip(repo: Path | str, refname: str) -> str | None:
    """The commit a full ref name (``refs/remotes/origin/main``) points to, or None."""
    ref = open_repository(repo).references.get(refname)
    return str(ref.resolve().target) if ref is not None else None


def branch_tip(repo: Path | str, branch: str) -> str | None:
    """The commit local ``branch`` points to, or None when there is no such branch."""
    return ref_tip(repo, f"refs/heads/{branch}")


def set_ref(repo: Path | str, refname: str, sha: str | None) -> None:
    """Point the full ref ``refname`` at ``sha`` (created or moved); None deletes it (a missing one is fine)."""
    git = open_repository(repo)
    with ref_lock(git):
        if sha is None:
            ref = git.references.get(refname)
            if ref is not None:
                retry_locked(ref.delete)
        else:
            retry_locked(lambda: git.references.create(refname, pygit2.Oid(hex=sha), force=True))


def set_branch(repo: Path | str, branch: str, sha: str) -> None:
    """Point ``branch`` at ``sha``, creating it or moving it (the files of a checkout are not touched)."""
    set_ref(repo, f"refs/heads/{branch}", sha)


def has_commit(repo: Path | str, sha: str) -> bool:
    """Whether the object database holds commit ``sha``."""
    try:
        return isinstance(open_repository(repo).get(sha), pygit2.Commit)
    except ValueError:
        return False


def commit_info(repo: Path | str, revision: str) -> CommitInfo:
    """Id, parents, tree and signatures of a commit (an id or a ref name);
    :class:`RevisionNotFoundError` when it does not resolve."""
    return _info(resolve_commit(open_repository(repo), revision))


def merge_base(repo: Path | str, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, or None when their histories are unrelated."""
    found = open_repository(repo).merge_base(pygit2.Oid(hex=a), pygit2.Oid(hex=b))
    return str(found) if found else None


def is_descendant(repo: Path | str, sha: str, ancestor: str) -> bool:
    """Whether ``sha`` contains ``ancestor`` in its history (a push of it is a fast-forward)."""
    git = open_repository(repo)
    if git.get(ancestor) is None:
        return False
    return bool(git.descendant_of(sha, ancestor))


def commits_since(repo: Path | str, head: str, base: str) -> list[CommitInfo]:
    """Commits reachable from ``head`` and not from ``base``, newest first (topological order)."""
    git = open_repository(repo)
    walker = git.walk(pygit2.Oid(hex=head), pygit2.enums.SortMode.TOPOLOGICAL)
    walker.hide(pygit2.Oid(hex=base))
    return [_info(c) for c in walker]


def remote_url(repo: Path | str, remote: str) -> str | None:
    """The URL of a configured remote, or None when there is no such remote."""
    try:
        return open_repository(repo).remotes[remote].url
    except (KeyError, IndexError):
        return None


def _info(commit: pygit2.Commit) -> CommitInfo:
    return CommitInfo(sha=str(commit.id), parents=tuple(str(p) for p in commit.parent_ids), tree=str(commit.tree_id),
                      author_name=commit.author.name, author_email=commit.author.email,
                      committer_email=commit.committer.email)


def branch_commit_message(repo: Path | str, branch: str) -> tuple[str, str] | None:
    """(commit id, message) of local ``branch``'s tip, or None when there is no such branch or repository."""
    try:
        git = open_repository(repo)
        ref = git.branches.local.get(branch)
        if ref is None:
            return None
        commit = git[ref.target]
    except (pygit2.GitError, KeyError, ValueError):
        return None
    return str(commit.id), commit.message
