"""Data outside git in a trial's tree: symbolic links to the repository's own files, no git involved.

A trial's worktree holds only what git tracks; the contract's ``[data] paths``
(datasets, tokenizers, checkpoints) are linked into it after the trial's commit,
so links are never committed.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["link_data"]


def link_data(origin: Path, tree: Path, paths: tuple[str, ...]) -> int:
    """Make the contract's data paths (git-ignored datasets, tokenizers, checkpoints) reachable in ``tree``.

    Directories are recreated in the worktree and every file in them is a symbolic
    link to the original: nothing is copied, files the job creates next to the
    data land in the worktree, and a file git tracks is never replaced. An existing
    data file overwritten *through* a link would change the original; the lock's
    data identity catches that after the trial. Returns the number of links made.
    """
    made = 0
    for rel in paths:
        src = origin / rel
        if src.is_file():
            pairs = [(src, tree / rel)]
        else:
            pairs = []
            for dirpath, _dirs, names in os.walk(src, followlinks=True):
                sub = Path(dirpath).relative_to(origin)
                (tree / sub).mkdir(parents=True, exist_ok=True)
                pairs += [(Path(dirpath) / n, tree / sub / n) for n in names]
        for source, target in pairs:
            if target.exists() or target.is_symlink():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source.resolve())
            made += 1
    return made
