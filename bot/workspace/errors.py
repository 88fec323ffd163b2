"""Errors raised by the git layer.

Every message says what went wrong *and* what the user can do about it, because
these errors surface in CLI output and in bot comments, far from the code that
raised them.
"""

from __future__ import annotations

from pathlib import Path

from infrarsi.errors import BAD_INPUT, InfraRSIError


class GitLayerError(InfraRSIError):
    """Base class for every error raised by ``bot.workspace``."""

    exit_code = BAD_INPUT


class NotARepositoryError(GitLayerError):
    """The path given is not inside a git repository."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        super().__init__(
            f"{self.path} is not a git repository (or any parent of one). "
            "Run InfraRSI from inside the training repository."
        )


class InvalidRunIdError(GitLayerError, ValueError):
    """A run id that cannot become part of a branch name."""

    def __init__(self, run_id: str, why: str) -> None:
        self.run_id = run_id
        super().__init__(
            f"invalid run id {run_id!r}: {why}. Run ids may contain letters, digits, "
            "'.', '_' and '-', and must not start with '.' or '-'."
        )


class RevisionNotFoundError(GitLayerError, LookupError):
    """A base revision (commit id or ref name) that does not resolve to a commit."""

    def __init__(self, revision: str, repo_path: Path | str) -> None:
        self.revision = revision
        super().__init__(
            f"cannot resolve {revision!r} to a commit in {repo_path}. "
            "Pass a commit id, a branch name or another ref that exists locally."
        )


class StaleBranchError(GitLayerError):
    """The trial branch already exists, typically left behind by a killed run.

    We refuse to reuse it: libgit2 >= 1.8 would happily check out the existing
    branch (at whatever commit it points to) instead of the requested base, and
    the trial would silently test the wrong code.
    """

    def __init__(self, branch: str, target: str | None = None) -> None:
        self.branch = branch
        self.target = target
        at = f" (at {target[:12]})" if target else ""
        super().__init__(
            f"branch {branch!r}{at} already exists, probably left behind by an earlier "
            "run that was interrupted. InfraRSI never reuses a trial branch; run "
            "`infrarsi gc` to clean up finished runs, or pick a new run id."
        )


class StaleWorktreeError(GitLayerError):
    """The worktree name or directory for a trial is already taken."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what}, probably left behind by an earlier run that was interrupted. "
            "Run `infrarsi gc` to clean it up, or pick a new run id."
        )


class WorktreeError(GitLayerError):
    """Creating, verifying or removing a trial worktree failed."""


class CommitError(GitLayerError):
    """Staging or committing a trial's changes failed."""


class RemoteError(GitLayerError):
    """Fetching from or pushing to a remote failed; the message holds libgit2's reason."""


class MergeConflictError(GitLayerError):
    """Two changes touch the same lines; ``paths`` are the conflicting files."""

    def __init__(self, paths: list[str], what: str) -> None:
        self.paths = sorted(set(paths))
        super().__init__(f"{what} conflicts in {', '.join(self.paths)}")
