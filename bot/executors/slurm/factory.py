"""Build the Slurm executor a contract asks for (the registry's ``"slurm"`` entry)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from bot.executors.slurm.executor import SlurmExecutor
from infrarsi.contract.model import Contract

DEFAULT_WORKDIR = ".infrarsi/slurm"  # under the repo, which the nodes must see (as the trial worktrees)


def workdir_of(contract: Contract) -> Path:
    settings = contract.launch.slurm
    path = Path(settings.workdir) if settings.workdir else Path(DEFAULT_WORKDIR)
    return path if path.is_absolute() else contract.root / path


def slurm_executor(contract: Contract, *, on_step: Callable[[int], None] | None = None,
                   stop: threading.Event | None = None,
                   environ: Mapping[str, str] | None = None) -> SlurmExecutor:
    return SlurmExecutor(contract.launch.slurm, workdir=workdir_of(contract), on_step=on_step, stop=stop,
                         environ=environ)
