"""Names InfraRSI gives to trial branches, worktrees and their directories.

All three are derived from ``(run_id, trial_no)`` so that a leftover of any one
of them (a branch, a worktree's metadata, a directory) can be traced back to
its run by ``infrarsi gc`` without any extra bookkeeping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pygit2

from bot.workspace.errors import InvalidRunIdError

BRANCH_PREFIX = "infrarsi/"
WORKTREE_NAME_PREFIX = "infrarsi-"
#: Every other branch InfraRSI owns, by what it holds: the promotion of a run (``infrarsi/promote/<run>``), the
#: record of a run that promote needs from a fresh checkout (``infrarsi/record/<run>``), and the experience bank
#: shared between clusters (``infrarsi/experience``). This module is their only spelling.
PROMOTE_PREFIX = f"{BRANCH_PREFIX}promote/"
RECORD_PREFIX = f"{BRANCH_PREFIX}record/"
EXPERIENCE_BRANCH = f"{BRANCH_PREFIX}experience"
#: The bot's own commit status on a promotion's head.
VERIFY_CONTEXT = f"{BRANCH_PREFIX}verify"

#: Run ids that would collide with the branches above, which gc must never treat as trial branches: derived
#: from them, so a new kind of branch cannot be forgotten here.
RESERVED_RUN_IDS = frozenset(name.removeprefix(BRANCH_PREFIX).split("/")[0]
                             for name in (PROMOTE_PREFIX, RECORD_PREFIX, EXPERIENCE_BRANCH, VERIFY_CONTEXT))


def promote_branch(run_id: str) -> str:
    return f"{PROMOTE_PREFIX}{run_id}"


def record_branch(run_id: str) -> str:
    return f"{RECORD_PREFIX}{run_id}"

_RUN_ID = re.compile(r"[A-Za-z0-9._-]+")
_TRIAL_BRANCH = re.compile(r"infrarsi/(?P<run>[A-Za-z0-9._-]+)/(?P<n>0|[1-9][0-9]*)")
_RUN_DASH_N = re.compile(r"(?P<run>[A-Za-z0-9._-]+)-(?P<n>0|[1-9][0-9]*)")


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialId:
    """The ``(run_id, trial_no)`` pair recovered from a branch or directory name."""

    run_id: str
    trial_no: int


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` unchanged, or raise :class:`InvalidRunIdError`.

    Beyond ``[A-Za-z0-9._-]+`` the id must make a valid git ref component and a
    valid directory name, so leading '.'/'-', '..' and a '.lock' suffix are out.
    """
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise InvalidRunIdError(str(run_id), "only [A-Za-z0-9._-] characters are allowed")
    if run_id[0] in ".-":
        raise InvalidRunIdError(run_id, "it must not start with '.' or '-'")
    if ".." in run_id or run_id.endswith((".", ".lock")):
        raise InvalidRunIdError(run_id, "it must not contain '..' or end with '.' or '.lock'")
    if run_id in RESERVED_RUN_IDS:
        raise InvalidRunIdError(run_id, f"{run_id!r} is reserved for InfraRSI's own branches")
    if not pygit2.reference_is_valid_name(f"refs/heads/{BRANCH_PREFIX}{run_id}/0"):
        raise InvalidRunIdError(run_id, "git does not accept it in a branch name")
    return run_id


def validate_trial_no(trial_no: int) -> int:
    """Trial numbers are non-negative ints (not bools, not strings)."""
    if isinstance(trial_no, bool) or not isinstance(trial_no, int) or trial_no < 0:
        raise ValueError(f"trial number must be a non-negative integer, got {trial_no!r}")
    return trial_no


def trial_branch(run_id: str, trial_no: int) -> str:
    """``infrarsi/<run-id>/<trial-no>``: the branch that records one trial."""
    return f"{BRANCH_PREFIX}{validate_run_id(run_id)}/{validate_trial_no(trial_no)}"


def worktree_name(run_id: str, trial_no: int) -> str:
    """libgit2 worktree name: one path component, unique per ``(run, trial)``.

    ``trial_no`` is an integer, so splitting on the *last* '-' recovers the pair
    even though run ids may contain '-'.
    """
    return f"{WORKTREE_NAME_PREFIX}{validate_run_id(run_id)}-{validate_trial_no(trial_no)}"


def worktree_dirname(run_id: str, trial_no: int) -> str:
    """Directory name of a trial worktree under its root: ``<run-id>-<trial-no>``."""
    return f"{validate_run_id(run_id)}-{validate_trial_no(trial_no)}"


def parse_trial_branch(branch: str) -> TrialId | None:
    """Inverse of :func:`trial_branch`; ``None`` for any other branch.

    Accepts both ``infrarsi/r/1`` and ``refs/heads/infrarsi/r/1``. Reserved run
    ids parse to ``None`` so ``infrarsi/promote/3`` is never mistaken for a trial.
    """
    short = branch.removeprefix("refs/heads/")
    match = _TRIAL_BRANCH.fullmatch(short)
    if not match or match["run"] in RESERVED_RUN_IDS:
        return None
    return TrialId(run_id=match["run"], trial_no=int(match["n"]))


def parse_worktree_name(name: str) -> TrialId | None:
    """Inverse of :func:`worktree_name`; ``None`` for worktrees InfraRSI did not name."""
    if not name.startswith(WORKTREE_NAME_PREFIX):
        return None
    return parse_dirname(name.removeprefix(WORKTREE_NAME_PREFIX))


def parse_dirname(dirname: str) -> TrialId | None:
    """Inverse of :func:`worktree_dirname`; ``None`` if it does not look like one."""
    match = _RUN_DASH_N.fullmatch(dirname)
    if not match or match["run"] in RESERVED_RUN_IDS:
        return None
    return TrialId(run_id=match["run"], trial_no=int(match["n"]))
