"""Trial worktrees: created on a new branch at the base, cleaned up on exit, never reusing a branch."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pygit2
import pytest

from bot.workspace import (
    InvalidRunIdError,
    NotARepositoryError,
    RevisionNotFoundError,
    StaleBranchError,
    StaleWorktreeError,
    collect_garbage,
    commit_worktree,
    create_trial_worktree,
    is_dirty,
    remove_trial_worktree,
    trial_branch,
    trial_worktree,
)
from tests.support.repos import MODEL_V1, MODEL_V2, git, make_model_repo


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of a working tree (bytes), skipping .git and InfraRSI's scratch dir."""
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in (".git", ".infrarsi") or not path.is_file():
            continue
        files[str(rel)] = path.read_bytes()
    return files


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "repo"
    first, second = make_model_repo(path)
    return path, first, second


def test_trial_branch_name() -> None:
    assert trial_branch("run-2024.01_a", 7) == "infrarsi/run-2024.01_a/7"


@pytest.mark.parametrize(
    "run_id", ["", "a/b", "sp ace", ".hidden", "-flag", "a..b", "x.lock", "end.", "promote", "ü"]
)
def test_trial_branch_rejects_bad_run_ids(run_id: str) -> None:
    with pytest.raises(InvalidRunIdError, match="invalid run id"):
        trial_branch(run_id, 1)


@pytest.mark.parametrize("trial_no", [-1, True, "3", 1.0])
def test_trial_branch_rejects_bad_trial_numbers(trial_no: object) -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        trial_branch("r", trial_no)  # type: ignore[arg-type]


def test_worktree_is_on_new_branch_at_base_and_main_tree_untouched(repo) -> None:
    path, first, second = repo
    (path / ".gitignore").write_text("*.log\n")
    user_gitignore = (path / ".gitignore").read_bytes()
    # An ignored file in the main tree, and commit the .gitignore so status is clean.
    (path / "debug.log").write_text("noise\n")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".gitignore")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ignore logs")
    head_before = git(path, "rev-parse", "HEAD").strip()
    before = snapshot(path)
    index_before = (path / ".git" / "index").read_bytes()

    with trial_worktree(path, base=first, run_id="r1", trial_no=3) as wt:
        assert wt.branch == "infrarsi/r1/3"
        assert wt.base_commit == first
        assert wt.path == path / ".infrarsi" / "worktrees" / "r1-3"
        assert (wt.path / "model.py").read_text() == MODEL_V1  # base, not main's MODEL_V2

        porcelain = git(path, "worktree", "list", "--porcelain")
        assert f"worktree {wt.path}\nHEAD {first}\nbranch refs/heads/infrarsi/r1/3" in porcelain
        assert git(wt.path, "status", "--porcelain") == ""
        assert git(wt.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "infrarsi/r1/3"

        (wt.path / "model.py").write_text("# candidate\n" + MODEL_V1)
        commit_worktree(wt.path, message="candidate", trailers={"InfraRSI-Run": "r1"})

        # The user's working tree, index and HEAD are exactly as they were.
        assert snapshot(path) == before
        assert (path / ".git" / "index").read_bytes() == index_before
        assert git(path, "status", "--porcelain") == ""
        assert not is_dirty(path)

    assert git(path, "rev-parse", "HEAD").strip() == head_before
    assert (path / "model.py").read_text() == MODEL_V2
    assert (path / ".gitignore").read_bytes() == user_gitignore
    assert "*" in (path / ".infrarsi" / ".gitignore").read_text().splitlines()
    assert git(path, "status", "--porcelain", "--ignored") == "!! .infrarsi/\n!! debug.log\n"


def test_base_may_be_a_ref_name(repo) -> None:
    path, _, second = repo
    with trial_worktree(path, base="main", run_id="r", trial_no=0) as wt:
        assert wt.base_commit == second
        assert (wt.path / "model.py").read_text() == MODEL_V2


def test_unknown_base_is_a_clear_error_and_leaves_nothing(repo) -> None:
    path, _, _ = repo
    with pytest.raises(RevisionNotFoundError, match="cannot resolve 'no-such-ref'"):
        with trial_worktree(path, base="no-such-ref", run_id="r", trial_no=0):
            pass
    assert "infrarsi/r/0" not in pygit2.Repository(str(path)).listall_branches()
    assert pygit2.Repository(str(path)).list_worktrees() == []


def test_exit_removes_directory_and_prunes_but_keeps_branch(repo) -> None:
    path, first, _ = repo
    with trial_worktree(path, base=first, run_id="r", trial_no=1) as wt:
        (wt.path / "scratch.bin").write_bytes(b"\0" * 100)
        ro = wt.path / "readonly"
        ro.mkdir()
        (ro / "f").write_text("x")
        (ro / "f").chmod(0o444)
        ro.chmod(0o555)  # training code sometimes leaves read-only outputs
    assert not wt.path.exists()
    assert str(wt.path) not in git(path, "worktree", "list")
    assert not (path / ".git" / "worktrees" / wt.name).exists()
    assert git(path, "rev-parse", "infrarsi/r/1").strip() == first
    git(path, "worktree", "prune", "--dry-run")  # nothing left for git to complain about
    assert git(path, "worktree", "prune", "--dry-run", "-v") == ""


def test_keep_branch_false_deletes_the_branch(repo) -> None:
    path, first, _ = repo
    with trial_worktree(path, base=first, run_id="r", trial_no=1, keep_branch=False):
        pass
    assert "infrarsi/r/1" not in pygit2.Repository(str(path)).listall_branches()


def test_exception_in_body_still_cleans_up(repo) -> None:
    path, first, _ = repo
    with pytest.raises(RuntimeError, match="trial crashed"):
        with trial_worktree(path, base=first, run_id="r", trial_no=2) as wt:
            raise RuntimeError("trial crashed")
    assert not wt.path.exists()
    assert pygit2.Repository(str(path)).list_worktrees() == []


def test_existing_branch_is_refused_not_reused(repo) -> None:
    path, first, second = repo
    r = pygit2.Repository(str(path))
    r.create_branch("infrarsi/r/4", r[second])  # e.g. left by a killed run, at another commit
    with pytest.raises(StaleBranchError) as info:
        with trial_worktree(path, base=first, run_id="r", trial_no=4):
            pytest.fail("must not enter")
    message = str(info.value)
    assert "infrarsi/r/4" in message and "infrarsi gc" in message
    assert git(path, "rev-parse", "infrarsi/r/4").strip() == second  # untouched
    assert r.list_worktrees() == []
    assert not (path / ".infrarsi" / "worktrees" / "r-4").exists()


def test_leftover_directory_is_refused(repo) -> None:
    path, first, _ = repo
    leftover = path / ".infrarsi" / "worktrees" / "r-5"
    leftover.mkdir(parents=True)
    (leftover / "keep.txt").write_text("someone's data")
    with pytest.raises(StaleWorktreeError, match="infrarsi gc"):
        create_trial_worktree(path, base=first, run_id="r", trial_no=5)
    assert (leftover / "keep.txt").read_text() == "someone's data"
    assert "infrarsi/r/5" not in pygit2.Repository(str(path)).listall_branches()


def test_custom_root_and_explicit_create_remove(repo, tmp_path: Path) -> None:
    path, first, _ = repo
    root = tmp_path / "elsewhere"
    wt = create_trial_worktree(path, base=first, run_id="r", trial_no=6, root=root)
    try:
        assert wt.path == root / "r-6"
        assert git(wt.path, "rev-parse", "HEAD").strip() == first
    finally:
        remove_trial_worktree(wt)
    assert not wt.path.exists()
    assert pygit2.Repository(str(path)).list_worktrees() == []


def test_started_from_inside_a_worktree_uses_the_main_repository(repo) -> None:
    path, first, _ = repo
    with trial_worktree(path, base=first, run_id="outer", trial_no=0) as outer:
        with trial_worktree(outer.path, base=first, run_id="inner", trial_no=0) as inner:
            assert inner.path == path / ".infrarsi" / "worktrees" / "inner-0"
            assert inner.repo_path == path


def test_eight_concurrent_trials_from_threads(repo) -> None:
    path, first, _ = repo
    results: dict[int, str] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def trial(n: int) -> None:
        try:
            barrier.wait()
            with trial_worktree(path, base=first, run_id="par", trial_no=n) as wt:
                (wt.path / "model.py").write_text(f"# trial {n}\n" + MODEL_V1)
                results[n] = commit_worktree(
                    wt.path, message=f"trial {n}", trailers={"InfraRSI-Trial": str(n)}
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=trial, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert sorted(results) == list(range(8))
    assert len(set(results.values())) == 8
    for n, commit in results.items():
        assert git(path, "rev-parse", f"infrarsi/par/{n}").strip() == commit
        assert git(path, "show", f"{commit}:model.py").startswith(f"# trial {n}\n")
    assert git(path, "worktree", "list").count("\n") == 1  # only the main tree
    git(path, "fsck", "--strict", "--no-progress")
    assert git(path, "status", "--porcelain") == ""


def test_leftover_worktree_metadata_is_refused_until_gc(repo) -> None:
    path, first, _ = repo
    wt = create_trial_worktree(path, base=first, run_id="r", trial_no=7)
    shutil.rmtree(wt.path)
    git(path, "update-ref", "-d", "refs/heads/infrarsi/r/7")  # branch gone, metadata left
    with pytest.raises(StaleWorktreeError, match="infrarsi-r-7.*already registered"):
        create_trial_worktree(path, base=first, run_id="r", trial_no=7)
    collect_garbage(path)
    with trial_worktree(path, base=first, run_id="r", trial_no=7) as again:
        assert again.path.is_dir()


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(NotARepositoryError, match="not a git repository"):
        create_trial_worktree(tmp_path, base="main", run_id="r", trial_no=0)
