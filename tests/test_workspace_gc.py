"""gc: killed runs are detected and cleaned; protected branches and active runs survive; a finished run prunes its
own trial branches but those it keeps."""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path

import pygit2
import pytest

from bot.workspace import (
    StaleBranchError,
    collect_garbage,
    commit_worktree,
    create_trial_worktree,
    find_trial_worktrees,
    prune_run,
    remove_trial_worktree,
    trial_worktree,
)
from tests.support.repos import git, make_model_repo


def branches(repo: Path) -> set[str]:
    return set(pygit2.Repository(str(repo)).listall_branches())


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "repo"
    first, second = make_model_repo(path)
    return path, first, second


def _run_then_get_killed(repo_path: str, base: str) -> None:
    """Child process: start trial 0 of run 'doomed', commit, then die without cleanup."""
    with trial_worktree(Path(repo_path), base=base, run_id="doomed", trial_no=0) as wt:
        (wt.path / "model.py").write_text("# half-done candidate\n")
        commit_worktree(wt.path, message="half done", trailers={"InfraRSI-Run": "doomed"})
        os._exit(9)  # like SIGKILL: no finally, no atexit


def test_killed_run_is_detected_refused_and_cleaned(repo) -> None:
    path, first, _ = repo
    child = multiprocessing.get_context("fork").Process(
        target=_run_then_get_killed, args=(str(path), first)
    )
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 9

    leftover = path / ".infrarsi" / "worktrees" / "doomed-0"
    assert leftover.is_dir() and "infrarsi/doomed/0" in branches(path)
    assert str(leftover) in git(path, "worktree", "list")

    [info] = find_trial_worktrees(path)
    assert (info.run_id, info.trial_no, info.branch) == ("doomed", 0, "infrarsi/doomed/0")
    assert info.owner is not None and info.owner.pid == child.pid
    assert not info.is_prunable  # the directory is intact: only the owner tells it is dead
    assert not info.owner_alive and info.is_stale

    with pytest.raises(StaleBranchError, match="infrarsi/doomed/0.*infrarsi gc"):
        with trial_worktree(path, base=first, run_id="doomed", trial_no=0):
            pytest.fail("must not reuse the stale branch")

    report = collect_garbage(path)
    assert [w.name for w in report.removed_worktrees] == ["infrarsi-doomed-0"]
    assert "killed run" in report.removed_worktrees[0].reason
    assert report.deleted_branches == ("infrarsi/doomed/0",)
    assert not leftover.exists()
    assert str(leftover) not in git(path, "worktree", "list")
    assert git(path, "worktree", "prune", "--dry-run", "-v") == ""

    with trial_worktree(path, base=first, run_id="doomed", trial_no=0) as wt:
        assert git(wt.path, "rev-parse", "HEAD").strip() == first


def test_keeps_protected_branches_active_runs_and_non_trial_branches(repo) -> None:
    path, first, second = repo
    r = pygit2.Repository(str(path))
    for name in [
        "infrarsi/old/1", "infrarsi/old/2", "infrarsi/live/1", "infrarsi/pr/3",
        "infrarsi/promote/1", "infrarsi/promote/speedup", "infrarsi/experience", "feature",
    ]:
        r.create_branch(name, r[second])

    report = collect_garbage(path, active_runs={"live"}, protected_branches={"refs/heads/infrarsi/pr/3"})

    assert report.deleted_branches == ("infrarsi/old/1", "infrarsi/old/2")
    assert branches(path) == {
        "main", "feature", "infrarsi/live/1", "infrarsi/pr/3",
        "infrarsi/promote/1", "infrarsi/promote/speedup", "infrarsi/experience",
    }
    reasons = {k.name: k.reason for k in report.kept}
    assert reasons["infrarsi/live/1"] == "run live is active"
    assert reasons["infrarsi/pr/3"] == "protected"
    assert "not a trial branch" in reasons["infrarsi/experience"]
    assert "not a trial branch" in reasons["infrarsi/promote/1"]
    assert "feature" not in reasons and "main" not in reasons


def test_dry_run_changes_nothing(repo) -> None:
    path, first, _ = repo
    wt = create_trial_worktree(path, base=first, run_id="old", trial_no=0)
    remove_trial_worktree(wt)  # branch stays, as after a normal run
    before = branches(path)
    report = collect_garbage(path, dry_run=True)
    assert report.dry_run and report.deleted_branches == ("infrarsi/old/0",)
    assert branches(path) == before
    assert "would remove" in report.summary()


def test_never_deletes_the_branch_checked_out_in_the_main_tree(repo) -> None:
    path, _, second = repo
    r = pygit2.Repository(str(path))
    r.create_branch("infrarsi/old/5", r[second])
    r.set_head("refs/heads/infrarsi/old/5")
    report = collect_garbage(path)
    assert "infrarsi/old/5" in branches(path)
    assert {k.name: k.reason for k in report.kept}["infrarsi/old/5"] == "checked out in the main working tree"


def test_worktree_with_deleted_directory_is_pruned_even_for_an_active_run(repo) -> None:
    path, first, _ = repo
    wt = create_trial_worktree(path, base=first, run_id="live", trial_no=0)
    shutil.rmtree(wt.path)
    [info] = find_trial_worktrees(path)
    assert info.is_prunable and info.is_stale

    report = collect_garbage(path, active_runs={"live"})
    assert [w.name for w in report.removed_worktrees] == [wt.name]
    assert pygit2.Repository(str(path)).list_worktrees() == []
    assert "infrarsi/live/0" in branches(path)  # the run is active: its record stays
    remove_trial_worktree(wt)  # the run's own late cleanup must not fail


def test_live_worktrees_are_kept(repo) -> None:
    path, first, _ = repo
    with trial_worktree(path, base=first, run_id="busy", trial_no=0) as wt:
        report = collect_garbage(path)  # run not declared active, but its owner (us) is alive
        assert wt.path.is_dir()
        reasons = {k.name: k.reason for k in report.kept}
        assert "live process" in reasons[wt.name]
        assert reasons["infrarsi/busy/0"] == "checked out in a worktree that was kept"
    report = collect_garbage(path)
    assert report.deleted_branches == ("infrarsi/busy/0",)


def test_orphan_directories_and_foreign_worktrees(repo, tmp_path: Path) -> None:
    path, first, _ = repo
    # A trial directory whose metadata was pruned but which survived.
    wt = create_trial_worktree(path, base=first, run_id="old", trial_no=1)
    pygit2.Repository(str(path)).lookup_worktree(wt.name).prune(True)
    # Unknown data under .infrarsi/worktrees, and an active run's directory.
    unknown = path / ".infrarsi" / "worktrees" / "notes"
    unknown.mkdir()
    (unknown / "todo.txt").write_text("mine")
    active_dir = path / ".infrarsi" / "worktrees" / "live-2"
    active_dir.mkdir()
    # The user's own worktree elsewhere, on their own branch.
    user_wt = tmp_path / "user-wt"
    git(path, "worktree", "add", "-q", "-b", "experiment", str(user_wt), first)

    report = collect_garbage(path, active_runs={"live"})

    assert report.removed_directories == (wt.path,)
    assert not wt.path.exists()
    assert unknown.is_dir() and active_dir.is_dir()
    assert user_wt.is_dir() and "experiment" in branches(path)
    assert str(user_wt) in git(path, "worktree", "list")
    kept = {k.name: k.reason for k in report.kept}
    assert "not a git worktree" in kept[str(unknown)]
    assert kept[str(active_dir)] == "run live is active"


def test_a_finished_run_prunes_its_trial_branches_but_those_it_keeps(repo) -> None:
    path, first, _ = repo
    git_repo = pygit2.Repository(str(path))
    head = git_repo.get(first)
    for n in range(1, 6):
        git_repo.branches.local.create(f"infrarsi/r1/{n}", head)
    git_repo.branches.local.create("infrarsi/r2/1", head)
    git_repo.branches.local.create("infrarsi/promote/r1", head)
    with trial_worktree(path, base=first, run_id="r1", trial_no=6):  # still checked out: it stays
        pruned = prune_run(path, "r1", keep={"infrarsi/r1/4": "the verified winner's"})
    assert sorted(pruned.deleted) == [f"infrarsi/r1/{n}" for n in (1, 2, 3, 5)]
    assert [(k.name, k.reason) for k in pruned.left] == [("infrarsi/r1/4", "the verified winner's"),
                                                         ("infrarsi/r1/6", "checked out")]
    assert {b for b in branches(path) if b.startswith("infrarsi/")} >= {"infrarsi/r1/4", "infrarsi/r2/1",
                                                                         "infrarsi/promote/r1"}
    assert not {f"infrarsi/r1/{n}" for n in (1, 2, 3, 5)} & branches(path)
