"""The job a human's ``--command`` names: shell forms read, the launcher split off, the entry point found.

One reading for both drafters (built-in and model): the working directory and
environment from :mod:`shell_command`, ``[launch]`` from :mod:`launcher`, and the
contract's command and the user's arguments from the job's own argv.
"""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.stages.init.launcher import DraftedLaunch, split_launcher
from bot.stages.init.scan import python_files
from bot.stages.init.shell_command import ShellJob, read_command
from infrarsi.contract.entry import command_and_args, entry_file, split_interpreter


@dataclass(frozen=True, kw_only=True, slots=True)
class DraftedJob:
    """What ``init`` keeps of a command: where and how it starts, and what it runs."""

    shell: ShellJob
    launch: DraftedLaunch | None
    prog: tuple[str, ...]  # workload.command: ("python", "chargpt.py"), ("python", "-m", "scripts.base_train")
    args: tuple[str, ...]  # the user's arguments
    entry: str | None  # the entry file, repo-relative

    @property
    def workdir(self) -> str:
        return self.shell.workdir


def read_job(command: str, root: Path) -> DraftedJob:
    """The job ``command`` starts in the repo at ``root``; raises a one-line error when it cannot be kept."""
    shell = read_command(command, root)
    launch, argv = split_launcher(list(shell.argv))
    prog, args = command_and_args(argv)
    return DraftedJob(shell=shell, launch=launch, prog=tuple(prog), args=tuple(args),
                      entry=entry_file(root, shell.workdir, argv))


def missing_script(root: Path, workdir: str, argv: Sequence[str]) -> str | None:
    """Why the script ``argv`` runs is not in the repo at ``root`` (naming the nearest file that is), or None
    when it is there or the command runs no ``.py`` file (``-m`` may name an installed module)."""
    _, target, _ = split_interpreter(argv)
    if target is None or not target.endswith(".py") or entry_file(root, workdir, argv) is not None:
        return None
    base = posixpath.normpath(workdir or ".")
    wanted = posixpath.normpath(posixpath.join(base, target))
    names = [p.relative_to(root).as_posix() for p in python_files(root)]
    near = difflib.get_close_matches(wanted, names, n=1, cutoff=0.6)
    where = f" (from workload.workdir {workdir!r})" if base != "." else ""
    return (f"{' '.join(argv)}: no script {wanted} in {root}{where}"
            + (f"; did you mean {near[0]}?" if near else "; the command must run a file of the repo"))
