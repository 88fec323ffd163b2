"""Errors of the git layer: all bad input to the CLI, each message saying what to do, builtins kept for callers."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.workspace.errors import (CommitError, GitLayerError, InvalidRunIdError, MergeConflictError,
                                  NotARepositoryError, RemoteError, RevisionNotFoundError, StaleBranchError,
                                  StaleWorktreeError, WorktreeError)
from infrarsi.errors import BAD_INPUT, InfraRSIError


@pytest.mark.parametrize("cls", [GitLayerError, NotARepositoryError, InvalidRunIdError, RevisionNotFoundError,
                                 StaleBranchError, StaleWorktreeError, WorktreeError, CommitError, RemoteError,
                                 MergeConflictError])
def test_every_git_error_is_bad_input(cls: type) -> None:
    assert issubclass(cls, GitLayerError) and issubclass(cls, InfraRSIError)
    assert cls.exit_code == BAD_INPUT


def test_messages_say_what_went_wrong_and_what_to_do() -> None:
    e = NotARepositoryError("/tmp/x")
    assert e.path == Path("/tmp/x")
    assert str(e) == "/tmp/x is not a git repository (or any parent of one). Run InfraRSI from inside the training " \
        "repository."
    bad = InvalidRunIdError("-r", "it must not start with '.' or '-'")
    assert isinstance(bad, ValueError) and bad.run_id == "-r"
    assert str(bad).startswith("invalid run id '-r': it must not start with '.' or '-'. Run ids may contain")
    missing = RevisionNotFoundError("nope", "/repo")
    assert isinstance(missing, LookupError) and missing.revision == "nope"
    assert str(missing).startswith("cannot resolve 'nope' to a commit in /repo.")


def test_stale_branch_names_the_branch_its_tip_and_gc() -> None:
    e = StaleBranchError("infrarsi/r/1", "0123456789abcdef0123")
    assert (e.branch, e.target) == ("infrarsi/r/1", "0123456789abcdef0123")
    assert str(e).startswith("branch 'infrarsi/r/1' (at 0123456789ab) already exists")
    assert "`infrarsi gc`" in str(e)
    assert str(StaleBranchError("b")).startswith("branch 'b' already exists")
    assert str(StaleWorktreeError("worktree x exists")).startswith("worktree x exists, probably left behind")


def test_merge_conflict_lists_each_path_once_sorted() -> None:
    e = MergeConflictError(["b.py", "a.py", "b.py"], "merging the change")
    assert e.paths == ["a.py", "b.py"]
    assert str(e) == "merging the change conflicts in a.py, b.py"
