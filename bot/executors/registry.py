"""The one place an executor is chosen: ``[launch] executor`` in the contract, or ``--executor`` on a verb.

Each entry is a factory ``(contract, options) -> Executor``. A verb builds its
executor here and nowhere else, so a new executor (Actions, Slurm) becomes
reachable from every verb by adding one entry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infrarsi.contract.model import Contract
from infrarsi.seams.executor import Executor


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorOptions:
    """What a verb hands every factory: progress callback, interrupt event, the repo for remote executors."""

    on_step: Callable[[int], None] | None = None
    stop: threading.Event | None = None
    repo: Path | None = None


ExecutorFactory = Callable[[Contract, ExecutorOptions], Executor]


def _local(contract: Contract, options: ExecutorOptions) -> Executor:
    from bot.executors.local import LocalExecutor

    return LocalExecutor(on_step=options.on_step)


def _torchrun(contract: Contract, options: ExecutorOptions) -> Executor:
    from bot.executors.torchrun import TorchrunExecutor

    return TorchrunExecutor(contract.launch, on_step=options.on_step, stop=options.stop)


def _slurm(contract: Contract, options: ExecutorOptions) -> Executor:
    from bot.executors.slurm.factory import slurm_executor

    return slurm_executor(contract, on_step=options.on_step, stop=options.stop,
                          environ=getattr(options, "environ", None))


EXECUTORS: dict[str, ExecutorFactory] = {
    "local": _local,
    "torchrun": _torchrun,
    "slurm": _slurm,
}


class UnknownExecutorError(ValueError):
    """An executor name nobody registered."""


def executor_names() -> tuple[str, ...]:
    return tuple(EXECUTORS)


def build_executor(contract: Contract, *, name: str | None = None,
                   options: ExecutorOptions | None = None) -> Executor:
    """The executor ``name`` (default: the contract's ``launch.executor``)."""
    chosen = name or contract.launch.executor
    try:
        factory = EXECUTORS[chosen]
    except KeyError:
        raise UnknownExecutorError(f"executor {chosen!r}: expected one of {', '.join(EXECUTORS)}") from None
    return factory(contract, options or ExecutorOptions())
