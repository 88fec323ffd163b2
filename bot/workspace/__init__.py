"""InfraRSI's git layer: the :class:`infrarsi.seams.workspace.Workspace` seam over pygit2.

Trial worktrees and commits, refs and history (:mod:`bot.workspace.refs`),
trees built without a worktree (:mod:`bot.workspace.trees`), fetch and push
(:mod:`bot.workspace.remotes`) and garbage collection; :class:`GitWorkspace`
binds them to one repository. No other module of the bot imports pygit2.

The stages get a :class:`GitWorkspace` from the CLI and do their git work through
it; of this package they import only the modules that open no repository:
:mod:`~bot.workspace.naming`, :mod:`~bot.workspace.errors`,
:mod:`~bot.workspace.identity` and :mod:`~bot.workspace.data_links`. The CLI,
the forges, the executors and the bank call the functions here directly (the
patching screen reads a commit through a Workspace too).

Everything goes through pygit2 (no ``git`` subprocess), and no function keeps a
``pygit2.Repository`` across calls, so the API is safe to use from many
threads running trials in parallel.
"""

from bot.workspace.commits import (
    ChangedPath,
    changed_paths,
    commit_worktree,
    is_dirty,
    read_trailers,
    repo_head_commit,
)
from bot.workspace.data_links import link_data
from bot.workspace.errors import (
    CommitError,
    GitLayerError,
    InvalidRunIdError,
    NotARepositoryError,
    RevisionNotFoundError,
    StaleBranchError,
    StaleWorktreeError,
    WorktreeError,
)
from bot.workspace.gc import (
    GcReport,
    KeptItem,
    PruneReport,
    RemovedWorktree,
    TrialWorktreeInfo,
    collect_garbage,
    find_trial_worktrees,
    prune_run,
)
from bot.workspace.identity import BOT_IDENTITY, BotIdentity, format_message
from bot.workspace.naming import parse_trial_branch, trial_branch
from bot.workspace.git_workspace import GitWorkspace
from bot.workspace.worktrees import (
    Worktree,
    create_trial_worktree,
    remove_trial_worktree,
    trial_worktree,
)

__all__ = [
    "BOT_IDENTITY",
    "BotIdentity",
    "ChangedPath",
    "CommitError",
    "GcReport",
    "GitLayerError",
    "GitWorkspace",
    "InvalidRunIdError",
    "KeptItem",
    "NotARepositoryError",
    "PruneReport",
    "RemovedWorktree",
    "RevisionNotFoundError",
    "StaleBranchError",
    "StaleWorktreeError",
    "TrialWorktreeInfo",
    "Worktree",
    "WorktreeError",
    "changed_paths",
    "collect_garbage",
    "commit_worktree",
    "create_trial_worktree",
    "find_trial_worktrees",
    "format_message",
    "prune_run",
    "is_dirty",
    "link_data",
    "parse_trial_branch",
    "read_trailers",
    "remove_trial_worktree",
    "repo_head_commit",
    "trial_branch",
    "trial_worktree",
]
