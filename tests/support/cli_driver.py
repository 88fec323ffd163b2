"""The real CLI driven in-process, with every executor replaced by one that records each trial it is asked to start.

A test asks :func:`recorded_starts` for the list the executors append to; a verb that reaches an executor is
stopped there by :class:`TrialStarted` (a ``BaseException``, so no handler of the product swallows it). What a
verb left behind is read back from the repository: trials and pending trials in the journal, trial branches,
worktrees.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

from bot.cli.main import main
from bot.executors import registry
from infrarsi.journal import Journal
from infrarsi.seams.executor import Execution, Executor, TrialSpec


class TrialStarted(BaseException):
    """A verb asked an executor to start a trial (raised by :class:`RecordingExecutor`)."""


class RecordingExecutor(Executor):
    """Records the spec of every trial it is asked to run; ``execution`` (when given) is returned instead of
    stopping the verb with :class:`TrialStarted`."""

    name = "local"

    def __init__(self, starts: list[TrialSpec], execution: Execution | None = None) -> None:
        self.starts = starts
        self.execution = execution

    def execute(self, spec: TrialSpec) -> Execution:
        self.starts.append(spec)
        if self.execution is None:
            raise TrialStarted(" ".join(spec.argv))
        return self.execution

    def interrupt(self) -> None:
        return None


def recorded_starts(monkeypatch: pytest.MonkeyPatch, execution: Execution | None = None) -> list[TrialSpec]:
    """Every executor of the registry replaced by a :class:`RecordingExecutor`; the list of specs it records."""
    starts: list[TrialSpec] = []
    for name in list(registry.EXECUTORS):
        monkeypatch.setitem(registry.EXECUTORS, name, lambda contract, options: RecordingExecutor(starts, execution))
    return starts


@dataclass(frozen=True)
class Outcome:
    """What one command line did: its exit status, stdout and stderr, and whether it raised anything else."""

    code: int | None
    out: str
    err: str
    raised: BaseException | None = None

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error: ")]


def run_cli(argv: Sequence[str]) -> Outcome:
    """``infrarsi ARGV`` in this process; a usage error's ``SystemExit`` is its status, anything else that is
    raised (a traceback, a started trial) is kept in ``raised``."""
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    raised: BaseException | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        except BaseException as e:  # noqa: BLE001 - the test judges what escaped
            raised = e
    return Outcome(code=code, out=out.getvalue(), err=err.getvalue(), raised=raised)


def journal_trials(repo: Path) -> int:
    """Trials recorded or pending in the repo's journal (0 without one)."""
    path = repo / ".infrarsi" / "journal.sqlite"
    if not path.is_file():
        return 0
    with Journal(path) as journal:
        return len(journal.trials()) + len(journal.pending())


def trial_branches(repo: Path) -> list[str]:
    """The repo's ``infrarsi/*`` branches (none outside git)."""
    if not (repo / ".git").exists():
        return []
    return sorted(b for b in pygit2.Repository(str(repo)).listall_branches() if b.startswith("infrarsi/"))


def worktrees(repo: Path) -> list[str]:
    if not (repo / ".git").exists():
        return []
    return list(pygit2.Repository(str(repo)).list_worktrees())


def left_behind(repo: Path) -> tuple[int, list[str], list[str]]:
    """(journal trials, trial branches, worktrees): all empty when no trial ran."""
    return journal_trials(repo), trial_branches(repo), worktrees(repo)
