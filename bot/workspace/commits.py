"""Recording a trial as a commit, and reading trial commits back.

Every trial ends as one commit on its ``infrarsi/<run>/<n>`` branch, authored
and committed by the bot, with ``InfraRSI-*`` git trailers naming the run, the
trial and the candidate. The commit is the durable record: ``git log`` shows
what was tried, and the trailers let tools find it again without a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import pygit2

from bot.workspace._access import open_repository
from bot.workspace.errors import CommitError, RevisionNotFoundError
from bot.workspace.identity import BOT_IDENTITY, BotIdentity, format_message
from bot.workspace.worktrees import resolve_commit

__all__ = [
    "BotIdentity",
    "BOT_IDENTITY",
    "ChangedPath",
    "commit_all",
    "commit_worktree",
    "format_message",
    "read_trailers",
    "changed_paths",
    "repo_head_commit",
    "is_dirty",
    "signature",
]


def signature(identity: BotIdentity) -> pygit2.Signature:
    """``identity`` as a git signature stamped with the current time."""
    return pygit2.Signature(identity.name, identity.email)


class ChangedPath(NamedTuple):
    """One path changed between two commits; unpacks as ``(path, status)``.

    ``status`` is git's letter: ``A`` added, ``M`` modified, ``D`` deleted,
    ``T`` type changed. Renames are reported as ``D`` + ``A`` (like
    ``git diff --name-status --no-renames``) so the list never depends on a
    similarity heuristic.
    """

    path: str
    status: str


def commit_worktree(
    worktree_path: Path | str,
    *,
    message: str,
    author: BotIdentity = BOT_IDENTITY,
    trailers: Mapping[str, str],
) -> str:
    """Stage everything in the worktree and commit it on the worktree's branch.

    Staging goes through the worktree's own index: additions, modifications
    and deletions are all recorded, ignored files are not (the worktree's
    .gitignore applies). Returns the new commit id (hex).

    If nothing changed, the commit is still made, with the same tree as its
    parent: a knob-only candidate (an environment variable, a launcher flag)
    changes no file, and the empty commit with its trailers is its record.
    """
    full_message = format_message(message, trailers)
    repo = open_repository(worktree_path)
    if repo.workdir is None:
        raise CommitError(f"{worktree_path} is a bare repository; commit in a worktree instead")
    if repo.head_is_unborn or repo.head_is_detached:
        raise CommitError(
            f"{worktree_path} has no branch checked out (HEAD is "
            f"{'unborn' if repo.head_is_unborn else 'detached'}); trial worktrees "
            "must be on their infrarsi/<run>/<n> branch"
        )
    try:
        index = repo.index
        index.add_all()
        index.write()
        tree = index.write_tree()
        sig = signature(author)
        parent = repo.head.target
        # "HEAD" follows the symbolic ref, so this advances the trial branch; libgit2
        # also refuses if the branch moved since we read ``parent``.
        commit_id = repo.create_commit("HEAD", sig, sig, full_message, tree, [parent])
    except (pygit2.GitError, OSError) as exc:
        raise CommitError(f"could not commit the trial in {worktree_path}: {exc}") from exc
    return str(commit_id)


def commit_all(repo_path: Path | str, message: str, *, author: BotIdentity = BOT_IDENTITY) -> str:
    """Stage every file of the working tree and commit it on HEAD (the first commit too); the commit id."""
    repo = open_repository(repo_path)
    index = repo.index
    index.add_all()
    index.write()
    sig = signature(author)
    parents = [] if repo.head_is_unborn else [repo.head.target]
    return str(repo.create_commit("HEAD", sig, sig, message, index.write_tree(), parents))


def read_trailers(repo_path: Path | str, commit_id: str) -> dict[str, str]:
    """The git trailers of a commit, as parsed by libgit2 (``Key: value`` lines)."""
    repo = open_repository(repo_path)
    commit = resolve_commit(repo, commit_id)
    return dict(commit.message_trailers)


def changed_paths(repo_path: Path | str, base: str, commit: str) -> list[ChangedPath]:
    """Paths that differ between two commits, sorted by path."""
    repo = open_repository(repo_path)
    old = resolve_commit(repo, base)
    new = resolve_commit(repo, commit)
    diff = old.tree.diff_to_tree(new.tree)
    result = []
    for delta in diff.deltas:
        status = delta.status_char()
        path = delta.old_file.path if status == "D" else delta.new_file.path
        result.append(ChangedPath(path=path, status=status))
    return sorted(result)


def repo_head_commit(repo_path: Path | str) -> str:
    """The commit id (hex) HEAD points to in the repository or worktree at ``repo_path``."""
    repo = open_repository(repo_path)
    if repo.head_is_unborn:
        raise RevisionNotFoundError("HEAD", repo_path)
    return str(repo.head.target)


def is_dirty(repo_path: Path | str) -> bool:
    """Whether the working tree differs from HEAD (staged, unstaged or untracked).

    Ignored files do not count. Untracked files do: a trial copies the
    committed tree, so an untracked file the user relies on would be missing.
    """
    repo = open_repository(repo_path)
    if repo.workdir is None:
        return False
    return bool(repo.status(untracked_files="normal", ignored=False))
