"""The Workspace seam's contract, run against the pygit2 implementation (one suite per seam, as for forges).

Each test walks a call order the seam's docstring states: a trial (worktree → change → commit → remove),
a promotion (merge the change onto a moved base → export → commit files → branch → push), the queries
apply and promote make (head branch, merge base, commits by someone else) and the files of a commit read
without a checkout (the run's record, CODEOWNERS, the trials' base).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.workspace import GitWorkspace
from bot.workspace.errors import MergeConflictError, RevisionNotFoundError
from bot.workspace.refs import init_repository
from bot.workspace.remotes import add_remote
from infrarsi.seams.workspace import Workspace
from tests.support.repos import commit_all, init_repo, write_files


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    init_repo(tmp_path / "repo", {"model.py": "width = 32\n", "train.py": "steps = 10\n"})
    return GitWorkspace(tmp_path / "repo")


def test_a_trial_worktree_commits_its_change_on_its_own_branch(ws: Workspace) -> None:
    base = ws.branch_tip("main")
    assert base is not None and ws.head_branch() == "main"
    tree = ws.create_worktree(base=base, run_id="r1", trial_no=1)
    assert tree.branch == "infrarsi/r1/1" and tree.base_commit == base and tree.path.is_dir()
    (tree.path / "model.py").write_text("width = 64\n")
    before, after = ws.changed_files(tree.path, base)
    assert before == {"model.py": b"width = 32\n"} and after == {"model.py": b"width = 64\n"}
    sha = ws.commit_trial(tree.path, message="trial 1", trailers={"InfraRSI-Run": "r1"})
    ws.remove_worktree(tree)
    assert not tree.path.exists() and ws.branch_tip("infrarsi/r1/1") == sha  # the branch is the record
    info = ws.commit_info(sha)
    assert info.parents == (base,) and ws.has_commit(sha) and not ws.has_commit("0" * 40)
    parent, diff = ws.diff_to_parent(sha) or ("", "")
    assert parent == base and "-width = 32" in diff and "+width = 64" in diff
    assert (ws.root / "model.py").read_text() == "width = 32\n"  # the user's checkout is untouched


def test_a_change_merges_onto_a_moved_base_and_commits_without_a_checkout(ws: Workspace, tmp_path: Path) -> None:
    base = ws.branch_tip("main") or ""
    tree = ws.create_worktree(base=base, run_id="r2", trial_no=1)
    (tree.path / "model.py").write_text("width = 64\n")
    change = ws.commit_trial(tree.path, message="trial", trailers={})
    ws.remove_worktree(tree)
    write_files(ws.root, {"train.py": "steps = 20\n"})
    moved = commit_all(ws.root, "someone else moves main")
    merged = ws.merge_change(change, moved)
    out = tmp_path / "export"
    ws.export_tree(merged, out)
    assert (out / "model.py").read_text() == "width = 64\n" and (out / "train.py").read_text() == "steps = 20\n"
    sha, tree_id = ws.commit_files(tree=merged, files={"knobs.txt": b"dtype=bf16\n"}, parents=[moved],
                                   message="promote")
    assert ws.commit_info(sha).parents == (moved,) and ws.commit_info(sha).tree == tree_id
    ws.set_branch("infrarsi/promote/r2", sha)
    assert ws.branch_tip("infrarsi/promote/r2") == sha and ws.branch_tip("main") == moved
    assert ws.merge_base(sha, moved) == moved
    assert [c.sha for c in ws.commits_since(sha, moved)] == [sha]
    assert ws.commits_since(moved, base)[0].author_email == "user@example.com"  # a human's commit is named

    remote = tmp_path / "remote.git"
    init_repository(remote, bare=True)
    add_remote(ws.root, "origin", str(remote))
    assert ws.push("origin", ["refs/heads/infrarsi/promote/r2:refs/heads/infrarsi/promote/r2"]) == {}
    assert GitWorkspace(remote).branch_tip("infrarsi/promote/r2") == sha
    ws.fetch_branches("origin", ["infrarsi/promote/r2", "no-such-branch"])  # best effort: never raises


def test_failures_raise_the_documented_errors(ws: Workspace) -> None:
    base = ws.branch_tip("main") or ""
    with pytest.raises(RevisionNotFoundError):
        ws.commit_info("no-such-branch")
    ours = ws.create_worktree(base=base, run_id="r3", trial_no=1)
    (ours.path / "model.py").write_text("width = 64\n")
    change = ws.commit_trial(ours.path, message="ours", trailers={})
    ws.remove_worktree(ours)
    write_files(ws.root, {"model.py": "width = 48\n"})
    theirs = commit_all(ws.root, "a conflicting edit")
    with pytest.raises(MergeConflictError) as conflict:
        ws.merge_change(change, theirs)
    assert conflict.value.paths == ["model.py"] and "model.py" in str(conflict.value)
    assert ws.branch_tip("nothing") is None and ws.merge_base(change, theirs) == base


def test_the_files_of_a_commit_are_read_without_a_checkout(ws: Workspace) -> None:
    head = ws.head_commit()
    assert head == ws.branch_tip("main")
    files = ws.list_files(head)
    assert sorted(files) == ["model.py", "train.py"] and ws.read_blob(files["model.py"]) == b"width = 32\n"
    assert ws.list_files(None) == {}
    sha, _ = ws.commit_files(tree=head, files={"src/data/load.py": b"rows = 4\n"}, parents=[head], message="nested")
    nested = ws.list_files(sha)
    assert sorted(nested) == ["model.py", "src/data/load.py", "train.py"]
    assert ws.read_blob(nested["src/data/load.py"]) == b"rows = 4\n" and nested["model.py"] == files["model.py"]
    assert ws.head_commit() == head  # a commit on no branch moves nothing
    with pytest.raises(RevisionNotFoundError):
        ws.list_files("no-such-branch")


def test_head_is_read_where_the_workspace_was_opened(ws: Workspace) -> None:
    base = ws.head_commit()
    tree = ws.create_worktree(base=base, run_id="r4", trial_no=1)
    inside = GitWorkspace(tree.path)
    assert inside.head_branch() == "infrarsi/r4/1" and inside.head_commit() == base
    assert inside.root == ws.root and ws.head_branch() == "main"  # the main working tree stays where it was
    ws.remove_worktree(tree, keep_branch=False)
