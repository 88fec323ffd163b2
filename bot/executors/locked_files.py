"""The lock, checked by the launcher where the job runs: before it starts and after it ends.

The bot checks the lock in its own tree too (``bot/stages/run/run_trial.py``), but a
runner's checkout is not the bot's tree: only a check made where the job ran
says that no locked file changed under it. The spec carries the hashes the bot
read before launch (``TrialSpec.lock``), so a job that edits a locked file and
re-takes ``infrarsi.lock`` is still caught.
"""

from __future__ import annotations

from pathlib import Path

from infrarsi.contract.lock import sha256_file
from infrarsi.seams.executor import TrialSpec


def changed_locked_files(spec: TrialSpec) -> tuple[str, ...] | None:
    """The locked files that are missing or differ from ``spec.lock`` in ``spec.root`` (none: a contract that locks
    no file); None when the spec asks for no check (no ``root``, no ``lock``: a launch not made by a trial)."""
    if not spec.lock and spec.root is None:
        return None
    root = Path(spec.root or spec.cwd)
    changed = []
    for rel, want in spec.lock:
        try:
            if sha256_file(root / rel) != want:
                changed.append(rel)
        except OSError:
            changed.append(rel)
    return tuple(changed)


def merged(before: tuple[str, ...] | None, after: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if before is None and after is None:
        return None
    return tuple(sorted(set(before or ()) | set(after or ())))


def refused(spec: TrialSpec, changed: tuple[str, ...]) -> str:
    """Why a launcher did not start a job whose tree no longer matches the lock."""
    return (f"not started: {len(changed)} locked file(s) differ from the lock in {spec.root or spec.cwd} before "
            f"launch: {', '.join(changed[:5])}")
