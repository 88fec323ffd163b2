"""Build the Slurm executor a contract asks for (the registry's ``"slurm"`` entry)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from bot.executors.slurm.executor import SlurmExecutor
from infrarsi.contract.model import Contract
from infrarsi.rundir import slurm_dir

def workdir_of(contract: Contract) -> Path:
    settings = contract.launch.slurm
    if not settings.workdir:
        return slurm_dir(contract.root)
    path = Path(settings.workdir)
    return path if path.is_absolute() else contract.root / path


def slurm_executor(contract: Contract, *, on_step: Callable[[int], None] | None = None,
                   stop: threading.Event | None = None,
                   environ: Mapping[str, str] | None = None) -> SlurmExecutor:
    return SlurmExecutor(contract.launch.slurm, workdir=workdir_of(contract), on_step=on_step, stop=stop,
                         environ=environ)
