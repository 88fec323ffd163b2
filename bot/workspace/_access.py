"""Opening repositories and serialising ref updates.

libgit2 repository objects are not thread-safe, so nothing in ``bot.workspace`` keeps
one around: every operation opens a fresh :class:`pygit2.Repository` and drops
it when done. Opening is cheap (a few hundred microseconds) compared with the
checkout that follows.

Ref creation and deletion are additionally serialised per repository inside
the process, and retried briefly when another *process* holds a libgit2 lock
file (``packed-refs.lock``, ``refs/heads/x.lock``): a bot running many trials in
parallel must not fail a trial because two cleanups collided.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pygit2

from bot.workspace.errors import NotARepositoryError

T = TypeVar("T")

_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def open_repository(path: Path | str) -> pygit2.Repository:
    """Open the repository containing ``path`` (a fresh object every call)."""
    found = pygit2.discover_repository(str(path))
    if found is None:
        raise NotARepositoryError(path)
    return pygit2.Repository(found)


def common_dir(repo: pygit2.Repository) -> Path:
    """The repository's common git dir, even when ``repo`` is a linked worktree.

    pygit2 does not expose ``git_repository_commondir``; a linked worktree's
    git dir holds a ``commondir`` file naming it (relative or absolute).
    """
    git_dir = Path(repo.path)
    marker = git_dir / "commondir"
    if marker.is_file():
        return (git_dir / marker.read_text().strip()).resolve()
    return git_dir.resolve()


def open_main_repository(path: Path | str) -> pygit2.Repository:
    """Open the main repository, also when ``path`` is inside a linked worktree.

    Worktrees, their metadata and the ``.infrarsi`` directory all belong to the
    main repository, so trials started from inside another trial still land in
    the same place.
    """
    repo = open_repository(path)
    shared = common_dir(repo)
    if shared != Path(repo.path).resolve():
        return pygit2.Repository(str(shared))
    return repo


def main_workdir(repo: pygit2.Repository) -> Path:
    """Where ``.infrarsi/`` lives: the main working tree, or the git dir if bare."""
    return Path(repo.workdir if repo.workdir else repo.path).resolve()


def worktree_admin_dir(repo: pygit2.Repository, name: str) -> Path:
    """``<common-dir>/worktrees/<name>``: libgit2's per-worktree metadata dir."""
    return common_dir(repo) / "worktrees" / name


def _lock_for(repo: pygit2.Repository) -> threading.RLock:
    key = str(common_dir(repo))
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.RLock())


@contextmanager
def ref_lock(repo: pygit2.Repository) -> Iterator[None]:
    """Serialise ref mutations on one repository within this process."""
    with _lock_for(repo):
        yield


def retry_locked(action: Callable[[], T], *, attempts: int = 8, delay_s: float = 0.02) -> T:
    """Run ``action``, retrying while libgit2 reports a lock file held elsewhere."""
    for attempt in range(attempts):
        try:
            return action()
        except pygit2.GitError as exc:
            # Only the generic GitError: subclasses (AlreadyExists, NotFound, ...)
            # are real answers, not contention, even if their text mentions a lock.
            contended = type(exc) is pygit2.GitError and "lock" in str(exc).lower()
            if not contended or attempt == attempts - 1:
                raise
            time.sleep(delay_s * (2**attempt))
    raise AssertionError("unreachable")
