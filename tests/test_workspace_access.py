"""Opening repositories (also from a linked worktree) and retrying ref updates a lock file held elsewhere blocks."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from bot.workspace._access import (common_dir, main_workdir, open_main_repository, open_repository, ref_lock,
                                   retry_locked, worktree_admin_dir)
from bot.workspace.errors import NotARepositoryError
from tests.support.repos import init_repo


def test_open_from_a_subdirectory_and_refuse_outside_a_repository(tmp_path: Path) -> None:
    init_repo(tmp_path / "repo", {"pkg/a.py": "x = 1\n"})
    repo = open_repository(tmp_path / "repo" / "pkg")
    assert Path(repo.workdir).resolve() == (tmp_path / "repo").resolve()
    assert open_repository(tmp_path / "repo") is not repo  # a fresh object every call
    with pytest.raises(NotARepositoryError):
        open_repository(tmp_path / "elsewhere")


def test_a_linked_worktree_leads_back_to_the_main_repository(tmp_path: Path) -> None:
    main = tmp_path / "repo"
    init_repo(main, {"a.py": "x = 1\n"})
    git = pygit2.Repository(str(main))
    git.add_worktree("wt1", str(tmp_path / "wt1"))
    linked = open_repository(tmp_path / "wt1")
    assert common_dir(linked) == (main / ".git").resolve() == common_dir(git)
    assert main_workdir(open_main_repository(tmp_path / "wt1")) == main.resolve()
    assert worktree_admin_dir(linked, "wt1") == (main / ".git" / "worktrees" / "wt1").resolve()
    assert worktree_admin_dir(linked, "wt1").is_dir()
    with ref_lock(linked), ref_lock(git):  # one re-entrant lock per repository
        pass


def test_bare_repositories_live_in_their_git_dir(tmp_path: Path) -> None:
    pygit2.init_repository(str(tmp_path / "remote.git"), bare=True)
    assert main_workdir(open_repository(tmp_path / "remote.git")) == (tmp_path / "remote.git").resolve()


def test_retry_locked_retries_only_lock_contention() -> None:
    calls = []

    def contended() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise pygit2.GitError("failed to lock file 'refs/heads/x.lock' for writing")
        return "done"

    assert retry_locked(contended, delay_s=0.0) == "done" and len(calls) == 3

    def always() -> None:
        raise pygit2.GitError("cannot lock ref")

    with pytest.raises(pygit2.GitError, match="cannot lock"):
        retry_locked(always, attempts=2, delay_s=0.0)

    answers = []

    def exists() -> None:
        answers.append(1)
        raise pygit2.AlreadyExistsError("the lock is taken, but this is a real answer")

    with pytest.raises(pygit2.AlreadyExistsError):
        retry_locked(exists, delay_s=0.0)
    assert len(answers) == 1
