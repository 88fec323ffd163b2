"""What git does not track in a working tree: the paths a trial's fresh worktree will not have.

``init`` drafts ``[data] paths`` from this list, ``check`` warns about a named path
on it that the contract does not list, and a crashed trial names which of them it
lacked. Paths are listed the way ``git ls-files --others --directory`` lists them,
so a whole ignored ``data/`` is one entry and a downloaded folder nobody wrote a
``.gitignore`` line for is one entry too:

- *ignored*: a directory an ignore rule matches as a whole is one entry; any other
  ignored file is its own entry (also inside an untracked folder);
- *untracked*: an untracked file outside every directory that holds a tracked file
  is collapsed to the outermost such directory; a directory holding only ignored
  files is not untracked.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pygit2

from bot.workspace._access import open_repository
from bot.workspace.errors import NotARepositoryError

__all__ = ["IGNORED", "UNTRACKED", "outside_git"]

IGNORED = "ignored"
UNTRACKED = "untracked"


def outside_git(path: Path | str) -> dict[str, str]:
    """``{path: "ignored" | "untracked"}`` of everything git does not track under ``path``, relative to it.

    Ignored entries come first, each kind sorted; ``{}`` outside a repository, in a bare one, or where git cannot
    read the working tree's status (a broken index: then nothing is drafted and ``git status`` says why)."""
    try:
        git = open_repository(path)
    except NotARepositoryError:
        return {}
    if git.workdir is None:
        return {}
    here = Path(path).resolve()
    try:
        prefix = here.relative_to(Path(git.workdir).resolve()).as_posix()
    except ValueError:  # ``path`` is inside the git dir
        return {}
    prefix = "" if prefix == "." else prefix + "/"
    try:
        held = _directories_holding_tracked_files(git)
        # "all" lists each untracked file (collapsed below, against the index); ignored directories stay whole
        statuses = git.status(untracked_files="all", ignored=True)
    except pygit2.GitError:
        return {}
    ignored: set[str] = set()
    untracked: set[str] = set()
    flags = pygit2.enums.FileStatus
    for entry, status in statuses.items():
        if not entry.startswith(prefix) or entry.rstrip("/") + "/" == prefix:
            continue
        if status & flags.IGNORED:
            ignored.add(entry.rstrip("/"))
        elif status == flags.WT_NEW:
            untracked.add(_outermost_untracked(entry.rstrip("/")[len(prefix):], prefix, held))
    out = {p[len(prefix):]: IGNORED for p in sorted(ignored)}
    out.update({p: UNTRACKED for p in sorted(untracked)})
    return out


def _directories_holding_tracked_files(git: pygit2.Repository) -> set[str]:
    held: set[str] = set()
    for entry in git.index:
        held.update(str(parent) for parent in PurePosixPath(entry.path).parents)
    return held


def _outermost_untracked(entry: str, prefix: str, held: set[str]) -> str:
    """The outermost folder around ``entry`` (relative to ``prefix``) that holds no tracked file; ``entry`` itself
    when every folder around it does."""
    parts = entry.split("/")
    for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        if prefix + folder not in held:
            return folder
    return entry
