"""Refs and history on a real repository: HEAD, tips, moves and deletes, ancestry, commits since a base."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from bot.workspace.errors import NotARepositoryError, RevisionNotFoundError
from bot.workspace.refs import (branch_commit_message, branch_tip, commit_info, commits_since, has_commit,
                                head_branch, init_repository, is_bare, is_descendant, is_git_repo,
                                main_repository_dir, merge_base, ref_tip, remote_url, repository_dir, set_branch,
                                set_ref)
from tests.support.repos import commit_all, init_repo


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    root = tmp_path / "repo"
    first = init_repo(root, {"a.py": "x = 1\n"}, message="first")
    (root / "a.py").write_text("x = 2\n")
    second = commit_all(root, "second\n\nbody")
    return root, first, second


def test_repository_queries(tmp_path: Path, repo: tuple[Path, str, str]) -> None:
    root, _, second = repo
    assert is_git_repo(root) and not is_git_repo(tmp_path)
    assert repository_dir(root).resolve() == main_repository_dir(root) == root.resolve()
    assert not is_bare(root)
    assert is_bare(init_repository(tmp_path / "remote.git", bare=True))
    with pytest.raises(NotARepositoryError):
        is_bare(tmp_path / "nothing")
    assert head_branch(root) == "main"
    assert head_branch(init_repository(tmp_path / "empty")) is None  # unborn
    pygit2.Repository(str(root)).set_head(pygit2.Oid(hex=second))
    assert head_branch(root) is None  # detached


def test_set_branch_moves_and_set_ref_deletes(repo: tuple[Path, str, str]) -> None:
    root, first, second = repo
    assert branch_tip(root, "main") == second and branch_tip(root, "nope") is None
    set_branch(root, "old", first)
    assert branch_tip(root, "old") == first
    set_branch(root, "old", second)
    assert ref_tip(root, "refs/heads/old") == second
    set_ref(root, "refs/heads/old", None)
    assert branch_tip(root, "old") is None
    set_ref(root, "refs/heads/old", None)  # a missing one is fine


def test_history(repo: tuple[Path, str, str]) -> None:
    root, first, second = repo
    info = commit_info(root, "main")
    assert (info.sha, info.parents) == (second, (first,))
    assert info.author_email == "user@example.com"
    with pytest.raises(RevisionNotFoundError):
        commit_info(root, "no-such-branch")
    assert has_commit(root, first) and not has_commit(root, "0" * 40) and not has_commit(root, "xyz")
    assert has_commit(root, info.tree) is False  # a tree is not a commit
    assert merge_base(root, first, second) == first
    assert is_descendant(root, second, first) and not is_descendant(root, first, second)
    assert not is_descendant(root, second, "1" * 40)
    assert [c.sha for c in commits_since(root, second, first)] == [second]
    assert commits_since(root, first, second) == []
    assert branch_commit_message(root, "main") == (second, "second\n\nbody")
    assert branch_commit_message(root, "nope") is None


def test_unrelated_histories_have_no_merge_base(tmp_path: Path, repo: tuple[Path, str, str]) -> None:
    root, _, second = repo
    other = init_repo(tmp_path / "other", {"b.py": "y = 1\n"})
    git = pygit2.Repository(str(root))
    git.remotes.create("other", str(tmp_path / "other"))
    git.remotes["other"].fetch(["+refs/heads/main:refs/remotes/other/main"])
    assert ref_tip(root, "refs/remotes/other/main") == other
    assert merge_base(root, second, other) is None
    assert remote_url(root, "other") == str(tmp_path / "other") and remote_url(root, "origin") is None
