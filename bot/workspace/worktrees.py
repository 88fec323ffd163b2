"""Trial worktrees: one linked git worktree, on its own new branch, per trial.

A candidate change is tested as an ordinary commit on ``infrarsi/<run>/<n>``,
checked out in ``<repo>/.infrarsi/worktrees/<run>-<n>``. The user's working tree
is never touched, parallel trials never share files, and the branch outlives
the worktree as the durable record of what was tested.

libgit2 facts this module is built around (pygit2 1.21 / libgit2 1.9):

* ``Repository.add_worktree(name, path, ref)`` checks out *whatever* branch it
  is handed; with libgit2 >= 1.8 an existing branch is reused silently. We
  therefore create the branch ourselves with ``force=False`` at the resolved
  base commit, refuse to continue if it already exists
  (:class:`StaleBranchError`), and verify HEAD of the new worktree afterwards.
* ``add_worktree`` does not create parent directories, and when it fails it can
  leave the branch behind; we create the root and roll back on failure.
* ``Worktree.prune()`` deletes only ``.git/worktrees/<name>``, never the
  directory; we ``rmtree`` the directory first, then prune.
* Repository objects are not thread-safe: every call opens its own.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pygit2

from bot.workspace._access import (
    open_main_repository,
    main_workdir,
    ref_lock,
    retry_locked,
    worktree_admin_dir,
)
from bot.workspace.data_links import link_data  # re-exported: it lived here
from bot.workspace.errors import (
    RevisionNotFoundError,
    StaleBranchError,
    StaleWorktreeError,
    WorktreeError,
)
from bot.workspace.naming import (
    trial_branch,
    validate_run_id,
    validate_trial_no,
    worktree_dirname,
    worktree_name,
)
from bot.workspace.owner import Owner, write_owner
from infrarsi.rundir import ensure_state_dir, worktrees_dir

__all__ = [
    "Worktree",
    "trial_branch",
    "trial_worktree",
    "create_trial_worktree",
    "remove_trial_worktree",
    "default_worktree_root",
    "resolve_commit",
    "delete_branch",
    "link_data",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Worktree:
    """A live trial worktree.

    ``base_commit`` is the resolved commit id (hex) the branch started from, so
    records stay meaningful even if ``base`` was a moving ref like ``main``.
    """

    path: Path
    branch: str
    base_commit: str
    name: str
    repo_path: Path


def default_worktree_root(repo_path: Path | str) -> Path:
    """``<repo>/.infrarsi/worktrees`` for the main working tree of ``repo_path``."""
    return worktrees_dir(main_workdir(open_main_repository(repo_path)))


def resolve_commit(repo: pygit2.Repository, base: str) -> pygit2.Commit:
    """Resolve a commit id (full or abbreviated) or ref name to a commit."""
    try:
        obj = repo.revparse_single(base)
        commit = obj.peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise RevisionNotFoundError(base, repo.workdir or repo.path) from exc
    assert isinstance(commit, pygit2.Commit)
    return commit


def create_trial_worktree(
    repo_path: Path | str,
    *,
    base: str,
    run_id: str,
    trial_no: int,
    root: Path | None = None,
) -> Worktree:
    """Create the worktree for one trial; the caller must remove it.

    Prefer :func:`trial_worktree`, which removes it for you. This form exists
    for callers whose trial outlives a ``with`` block (e.g. a job handed to an
    executor). A custom ``root`` inside the repository must be git-ignored by
    the caller; the default root ignores itself.
    """
    validate_run_id(run_id)
    validate_trial_no(trial_no)
    branch = trial_branch(run_id, trial_no)
    name = worktree_name(run_id, trial_no)

    repo = open_main_repository(repo_path)
    commit = resolve_commit(repo, base)
    workdir = main_workdir(repo)
    if root is None:
        ensure_state_dir(workdir)
        root = worktrees_dir(workdir)
    root = Path(root).resolve()
    path = root / worktree_dirname(run_id, trial_no)

    existing = repo.branches.local.get(branch)
    if existing is not None:
        raise StaleBranchError(branch, str(existing.target))
    if name in repo.list_worktrees():
        raise StaleWorktreeError(f"a git worktree named {name!r} is already registered")
    if path.exists():
        raise StaleWorktreeError(f"the trial directory {path} already exists")
    root.mkdir(parents=True, exist_ok=True)

    with ref_lock(repo):
        try:
            ref = retry_locked(lambda: repo.create_branch(branch, commit, False))
        except pygit2.AlreadyExistsError as exc:  # lost a race with another creator
            raise StaleBranchError(branch) from exc

    try:
        repo.add_worktree(name, str(path), ref)
        worktree = Worktree(
            path=path,
            branch=branch,
            base_commit=str(commit.id),
            name=name,
            repo_path=workdir,
        )
        _verify_checkout(worktree)
        write_owner(worktree_admin_dir(repo, name), Owner.current(run_id=run_id, trial_no=trial_no))
    except BaseException as exc:
        _rollback(repo, name=name, path=path, branch=branch)
        if isinstance(exc, (pygit2.GitError, OSError)):
            raise WorktreeError(
                f"could not create the worktree for {branch} at {path}: {exc}"
            ) from exc
        raise
    log.debug("created trial worktree %s at %s on %s", name, path, branch)
    return worktree


def remove_trial_worktree(worktree: Worktree, *, keep_branch: bool = True) -> None:
    """Delete the worktree directory, prune its metadata, optionally the branch.

    Keeping the branch is the default: its commit is the record of the trial.
    """
    repo = open_main_repository(worktree.repo_path)
    discard_worktree(repo, name=worktree.name, path=worktree.path)
    if not keep_branch:
        delete_branch(repo, worktree.branch)


@contextmanager
def trial_worktree(
    repo_path: Path | str,
    *,
    base: str,
    run_id: str,
    trial_no: int,
    root: Path | None = None,
    keep_branch: bool = True,
) -> Iterator[Worktree]:
    """A worktree at ``base`` on the new branch ``infrarsi/<run_id>/<trial_no>``.

    On exit (normal or not) the directory is removed and the worktree pruned;
    the branch is kept unless ``keep_branch=False``. A cleanup failure after an
    exception in the body is logged rather than raised, so it cannot hide the
    original error.

    Raises :class:`StaleBranchError` if the branch already exists (never
    reused), :class:`StaleWorktreeError` if the worktree name or directory is
    taken, :class:`RevisionNotFoundError` if ``base`` does not resolve.
    """
    worktree = create_trial_worktree(
        repo_path, base=base, run_id=run_id, trial_no=trial_no, root=root
    )
    try:
        yield worktree
    except BaseException:
        try:
            remove_trial_worktree(worktree, keep_branch=keep_branch)
        except Exception:
            log.exception("failed to clean up trial worktree %s; run `infrarsi gc`", worktree.path)
        raise
    remove_trial_worktree(worktree, keep_branch=keep_branch)


def discard_worktree(repo: pygit2.Repository, *, name: str, path: Path) -> None:
    """Remove a worktree's directory (if any) and prune its metadata (if any).

    Refuses to delete a directory that is not a linked worktree (no ``.git``
    *file*), so a mis-recorded path can never make us rmtree user data.
    """
    if path.exists():
        if not (path / ".git").is_file():
            raise WorktreeError(
                f"refusing to delete {path}: it is not a git worktree (no .git file). "
                "Remove it by hand if it is really scratch."
            )
        force_rmtree(path)
    try:
        worktree = repo.lookup_worktree(name)
    except KeyError:  # pygit2.NotFoundError; already pruned
        return
    worktree.prune(True)


def delete_branch(repo: pygit2.Repository, branch: str) -> bool:
    """Delete a local branch; ``False`` if it did not exist."""
    with ref_lock(repo):
        ref = repo.branches.local.get(branch)
        if ref is None:
            return False
        retry_locked(ref.delete)
        return True


def _verify_checkout(worktree: Worktree) -> None:
    """Never trust add_worktree: HEAD must be our new branch at the base commit."""
    wt_repo = pygit2.Repository(str(worktree.path))
    expected = f"refs/heads/{worktree.branch}"
    if wt_repo.head_is_detached or wt_repo.head.name != expected:
        raise WorktreeError(
            f"libgit2 checked out {wt_repo.head.name!r} instead of {expected!r} in {worktree.path}"
        )
    if str(wt_repo.head.target) != worktree.base_commit:
        raise WorktreeError(
            f"{worktree.branch} is at {wt_repo.head.target}, expected base {worktree.base_commit}"
        )


def _rollback(repo: pygit2.Repository, *, name: str, path: Path, branch: str) -> None:
    """Undo a half-made worktree: we checked the path and branch were free before."""
    try:
        if path.exists():
            force_rmtree(path)
        try:
            repo.lookup_worktree(name).prune(True)
        except KeyError:
            pass
        delete_branch(repo, branch)
    except Exception:
        log.exception("rollback of trial worktree %s failed; run `infrarsi gc`", path)


def force_rmtree(path: Path) -> None:
    """``shutil.rmtree`` that also removes read-only files (chmod, then retry)."""

    def force(func, target, _exc_info) -> None:  # type: ignore[no-untyped-def]
        # A read-only file cannot be unlinked from a read-only directory either.
        os.chmod(os.path.dirname(target), stat.S_IRWXU)
        if os.path.lexists(target) and not os.path.islink(target):
            os.chmod(target, stat.S_IRWXU)
        func(target)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=force)
    else:
        shutil.rmtree(path, onerror=force)
