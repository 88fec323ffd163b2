"""Branch and worktree names derived from (run id, trial no), and read back; reserved and invalid ids refused."""

from __future__ import annotations

import pytest

from bot.workspace.errors import InvalidRunIdError
from bot.workspace.naming import (EXPERIENCE_BRANCH, RESERVED_RUN_IDS, TrialId, parse_dirname, parse_trial_branch,
                                  parse_worktree_name, promote_branch, record_branch, trial_branch,
                                  validate_run_id, validate_trial_no, worktree_dirname, worktree_name)


def test_names_and_their_inverses_round_trip() -> None:
    for run, n in (("r1", 0), ("my-run-2", 12), ("a.b_c", 3)):
        tid = TrialId(run_id=run, trial_no=n)
        assert trial_branch(run, n) == f"infrarsi/{run}/{n}"
        assert parse_trial_branch(trial_branch(run, n)) == tid
        assert parse_trial_branch("refs/heads/" + trial_branch(run, n)) == tid
        assert worktree_name(run, n) == f"infrarsi-{run}-{n}"
        assert parse_worktree_name(worktree_name(run, n)) == tid
        assert parse_dirname(worktree_dirname(run, n)) == tid


def test_the_bots_other_branches() -> None:
    assert promote_branch("r1") == "infrarsi/promote/r1" and record_branch("r1") == "infrarsi/record/r1"
    assert EXPERIENCE_BRANCH == "infrarsi/experience"
    assert RESERVED_RUN_IDS == {"promote", "record", "experience", "verify"}


@pytest.mark.parametrize("name", ["main", "infrarsi/r1", "infrarsi/r1/01", "infrarsi/r1/x", "infrarsi/promote/3",
                                  "infrarsi/record/1", "other/r1/1"])
def test_other_branches_are_not_trials(name: str) -> None:
    assert parse_trial_branch(name) is None


def test_other_names_are_not_trial_worktrees() -> None:
    assert parse_worktree_name("r1-1") is None  # no prefix
    assert parse_worktree_name("infrarsi-r1") is None
    assert parse_dirname("promote-3") is None
    assert parse_dirname("r1-01") is None


@pytest.mark.parametrize(("run_id", "why"), [
    ("", "only [A-Za-z0-9._-] characters are allowed"),
    ("a/b", "only [A-Za-z0-9._-] characters are allowed"),
    ("a b", "only [A-Za-z0-9._-] characters are allowed"),
    (".hidden", "it must not start with '.' or '-'"),
    ("-x", "it must not start with '.' or '-'"),
    ("a..b", "it must not contain '..' or end with '.' or '.lock'"),
    ("a.", "it must not contain '..' or end with '.' or '.lock'"),
    ("r.lock", "it must not contain '..' or end with '.' or '.lock'"),
    ("promote", "'promote' is reserved for InfraRSI's own branches"),
])
def test_invalid_run_ids_say_why(run_id: str, why: str) -> None:
    with pytest.raises(InvalidRunIdError) as info:
        validate_run_id(run_id)
    assert str(info.value).startswith(f"invalid run id {run_id!r}: {why}.")
    with pytest.raises(InvalidRunIdError):
        trial_branch(run_id, 1)


@pytest.mark.parametrize("bad", [-1, True, "1", 1.0])
def test_trial_numbers_are_non_negative_ints(bad: object) -> None:
    with pytest.raises(ValueError, match="trial number must be a non-negative integer"):
        validate_trial_no(bad)  # type: ignore[arg-type]
    assert validate_trial_no(0) == 0
