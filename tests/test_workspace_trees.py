"""Trees without a checkout: changed files, a commit's diff, export, merging a change, commits of given files,
and landing a branch as a forge's merge button does (merge, squash, rebase)."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from bot.workspace.errors import MergeConflictError, RevisionNotFoundError
from bot.workspace.identity import BotIdentity
from bot.workspace.refs import branch_tip, commit_info, set_branch
from bot.workspace.trees import (changed_files, commit_files, diff_to_parent, export_tree, list_files,
                                 merge_change, merge_into_branch, read_blob)
from tests.support.repos import commit_all, init_repo

BOT = BotIdentity(name="bot", email="bot@x")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "repo"
    base = init_repo(root, {"a.py": "a = 1\n", "pkg/b.py": "b = 1\n", ".gitignore": "*.log\n"})
    return root, base


def _branch_commit(root: Path, base: str, branch: str, files: dict[str, str], message: str) -> str:
    """A commit of ``files`` over ``base`` on ``branch`` (HEAD and the checkout stay where they are)."""
    sha, _ = commit_files(root, tree=base, files={k: v.encode() for k, v in files.items()}, parents=[base],
                          message=message)
    set_branch(root, branch, sha)
    return sha


def test_changed_files_reports_before_and_after_ignoring_ignored_files(repo: tuple[Path, str]) -> None:
    root, base = repo
    (root / "a.py").write_text("a = 2\n")
    (root / "pkg" / "b.py").unlink()
    (root / "new.py").write_text("n = 1\n")
    (root / "run.log").write_text("ignored\n")
    before, after = changed_files(root, base)
    assert before == {"a.py": b"a = 1\n", "pkg/b.py": b"b = 1\n"}
    assert after == {"a.py": b"a = 2\n", "new.py": b"n = 1\n"}


def test_list_read_export_and_diff(tmp_path: Path, repo: tuple[Path, str]) -> None:
    root, base = repo
    files = list_files(root, base)
    assert sorted(files) == [".gitignore", "a.py", "pkg/b.py"] and list_files(root, None) == {}
    assert read_blob(root, files["pkg/b.py"]) == b"b = 1\n"
    export_tree(root, base, tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "b.py").read_text() == "b = 1\n" and not (tmp_path / "out" / ".git").exists()
    with pytest.raises(RevisionNotFoundError):
        export_tree(root, "0" * 40, tmp_path / "out2")
    with pytest.raises(RevisionNotFoundError):
        list_files(root, "nope")
    assert diff_to_parent(root, base) is None  # no parent
    (root / "a.py").write_text("a = 2\n")
    second = commit_all(root, "second")
    parent, diff = diff_to_parent(root, second)
    assert parent == base and "-a = 1\n+a = 2\n" in diff


def test_commit_files_writes_over_a_tree_and_keeps_modes(repo: tuple[Path, str]) -> None:
    root, base = repo
    sha, tree = commit_files(root, tree=base, files={"a.py": b"a = 3\n", "c.txt": b"c"}, parents=[base],
                             message="files", identity=BOT)
    info = commit_info(root, sha)
    assert info.tree == tree and info.parents == (base,) and info.author_email == "bot@x"
    files = list_files(root, sha)
    assert sorted(files) == [".gitignore", "a.py", "c.txt", "pkg/b.py"]
    assert read_blob(root, files["a.py"]) == b"a = 3\n"
    assert branch_tip(root, "main") == base  # no ref moved
    empty, _ = commit_files(root, tree=None, files={"only": b"x"}, parents=[], message="orphan")
    assert list(list_files(root, empty)) == ["only"]


def test_merge_change_applies_a_commits_own_diff_onto_a_moved_base(repo: tuple[Path, str]) -> None:
    root, base = repo
    change = _branch_commit(root, base, "change", {"a.py": "a = 2\n"}, "change")
    moved = _branch_commit(root, base, "moved", {"pkg/b.py": "b = 2\n"}, "moved")
    tree = pygit2.Repository(str(root)).get(merge_change(root, change, moved))
    assert tree["a.py"].data == b"a = 2\n" and tree["pkg/b.py"].data == b"b = 2\n"
    clash = _branch_commit(root, base, "clash", {"a.py": "a = 9\n"}, "clash")
    with pytest.raises(MergeConflictError) as info:
        merge_change(root, change, clash)
    assert info.value.paths == ["a.py"]
    with pytest.raises(ValueError, match="has no parent to diff against"):
        merge_change(root, base, moved)
    with pytest.raises(RevisionNotFoundError):
        merge_change(root, "f" * 40, moved)


@pytest.mark.parametrize("method", ["merge", "squash", "rebase"])
def test_merge_into_branch(repo: tuple[Path, str], method: str) -> None:
    root, base = repo
    head = _branch_commit(root, base, "feature", {"a.py": "a = 2\n"}, "feature")
    moved = _branch_commit(root, base, "target", {"pkg/b.py": "b = 2\n"}, "target moved")
    sha = merge_into_branch(root, "target", head, message="land it", identity=BOT, method=method)
    assert branch_tip(root, "target") == sha
    info = commit_info(root, sha)
    assert info.committer_email == "bot@x"
    expected_parents = {"merge": (moved, head), "squash": (moved,), "rebase": (moved,)}[method]
    assert info.parents == expected_parents
    # the merge commit is the bot's own; squash and rebase keep the change's author (the default identity here)
    assert info.author_email == ("bot@x" if method == "merge" else "infrarsi-bot@users.noreply.local")
    files = list_files(root, sha)
    assert read_blob(root, files["a.py"]) == b"a = 2\n" and read_blob(root, files["pkg/b.py"]) == b"b = 2\n"


def test_merge_into_branch_refusals(repo: tuple[Path, str]) -> None:
    root, base = repo
    head = _branch_commit(root, base, "feature", {"a.py": "a = 2\n"}, "feature")
    _branch_commit(root, base, "target", {"a.py": "a = 3\n"}, "target")
    with pytest.raises(RevisionNotFoundError):
        merge_into_branch(root, "absent", head, message="m", identity=BOT)
    with pytest.raises(ValueError, match="unknown merge method 'ff'; expected merge, squash or rebase"):
        merge_into_branch(root, "main", head, message="m", identity=BOT, method="ff")
    with pytest.raises(MergeConflictError, match="merged into target conflicts in a.py"):
        merge_into_branch(root, "target", head, message="m", identity=BOT)
