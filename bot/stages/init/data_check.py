"""Data the job names that git does not track and ``[data]`` does not list: what ``check`` and a crashed trial say.

A trial runs in a fresh worktree of the commit; a file git does not track (a
downloaded ``input.txt``, an ignored ``data/``) is only there when ``[data] paths``
lists it. ``check`` names such paths before any trial is spent; a trial that
crashed says which one existed in the repo's tree but not in its own, and how to
add it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from bot.patching.catalog import reach_of
from bot.stages.init.data_paths import outside_git_data, unlisted_data
from bot.stages.init.draft import canonical_flags
from infrarsi.contract.entry import given_values
from bot.stages.init.path_refs import OUTPUT_SETTING, PathRef, path_references
from bot.stages.init.scan import scan_flags
from infrarsi.contract.entry import command_and_args, entry_file
from infrarsi.contract.model import Contract
from infrarsi.source_text import read_source

_NOT_FOUND = re.compile(r"No such file or directory: ['\"]([^'\"]+)['\"]|['\"]([^'\"\s]+)['\"][^\n]*"
                        r"(?:does not exist|not found|no such file)", re.I)


def contract_paths(contract: Contract) -> list[PathRef]:
    """The paths the contract's job names: literals in the files it runs, its flags' values, its arguments."""
    root, workdir = contract.root, contract.workload.workdir
    argv = [*contract.workload.command, *contract.workload.args]
    entry = entry_file(root, workdir, argv)
    if entry is None:
        return []
    try:
        flags = scan_flags(read_source(root / entry))
    except (OSError, UnicodeError, SyntaxError, ValueError):
        flags = ()
    args = canonical_flags(command_and_args(argv)[1], flags)
    given = given_values(args)
    values = [(str(v), f"{f.flag}'s value", bool(OUTPUT_SETTING.search(f.dest)))
              for f in flags if isinstance(v := given.get(f.flag, f.default), str)]
    values += [(a, "the command", False) for a in args if not a.startswith("-")]
    reach = reach_of(contract)
    files = sorted(reach.modules) if reach.modules else [entry]
    return path_references(root, workdir=workdir, entry=entry, files=files, values=values)


def unlisted_lines(contract: Contract, outside: Mapping[str, str]) -> list[str]:
    """``check``'s lines: paths outside git (``outside``, what the workspace says git does not track in the
    contract's root) the job names that ``[data] paths`` lacks."""
    return unlisted_data(contract_paths(contract), outside_git_data(outside), contract.data.paths)


def missing_in_trial(contract: Contract, tree: Path, stderr_tail: str, outside: Mapping[str, str]) -> str | None:
    """Why a trial in ``tree`` may have crashed: paths that exist in the repo's tree but not in the trial's
    (``outside``: what git does not track in the repo's tree, for the entry to name)."""
    root = contract.root.resolve()
    if tree.resolve() == root:
        return None
    named = [a or b for a, b in _NOT_FOUND.findall(stderr_tail)]
    work = tree / contract.workload.workdir
    candidates = [_relative(work / n, tree) or "" for n in named] + [r.path for r in contract_paths(contract)
                                                                     if not r.written]
    outside = outside_git_data(outside)
    missing: list[str] = []
    for rel in dict.fromkeys(c for c in candidates if c):
        if not (root / rel).exists() or (tree / rel).exists():
            continue
        # what to add is what git lists as outside it (`data/`, not each file in it)
        entry = next((p for p in outside if rel == p or rel.startswith(p.rstrip("/") + "/")), rel)
        if entry not in missing:
            missing.append(entry)
    missing = [m for m in missing if not any(m != o and m.startswith(o.rstrip("/") + "/") for o in missing)]
    if not missing:
        return None
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return (f"{shown} exist{'s' if len(missing) == 1 else ''} in the repo's tree but not in the trial's worktree "
            "(git does not track it): add it to [data] paths in infrarsi.toml and run `infrarsi lock`, so every "
            "trial links it")


def _relative(path: Path, tree: Path) -> str | None:
    """``path`` (a file the job named, from its working directory) relative to the trial's tree, or None outside."""
    rel = Path(os.path.relpath(os.path.normpath(path), tree)).as_posix()
    return None if rel == ".." or rel.startswith("../") else rel
