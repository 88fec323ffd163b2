"""The one place an executor is chosen: ``[launch] executor`` in the contract, or ``--executor`` on a verb.

Each entry of :data:`EXECUTORS` is a factory ``(contract, options) -> Executor``:

- ``contract`` is the loaded contract, its ``launch.executor`` already the chosen name
  (:func:`select_executor` applies a ``--executor`` override before anything reads it),
  so a factory reads its own settings from ``contract.launch`` (``launch.actions`` for
  the Actions executor; a new executor adds its own table there);
- ``options`` is what the verb adds (:class:`ExecutorOptions`): a step callback, an
  interrupt event, the repository, the environment to read tokens from.

A factory that cannot build its executor (no token, no remote) raises
:class:`ExecutorSetupError` with one line saying what to set; the CLI prints it and
exits 2. A verb builds its executor here and nowhere else, so a new executor
(Slurm, say) is reachable from every verb by adding one entry here and its name
to ``infrarsi.contract.load.EXECUTORS``.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from infrarsi.contract.model import Contract
from infrarsi.errors import BAD_INPUT, InfraRSIError
from infrarsi.seams.executor import Executor


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorOptions:
    """What a verb hands every factory: progress callback, interrupt event, the repo and environment
    for remote executors (``None``: the contract's root, ``os.environ``)."""

    on_step: Callable[[int], None] | None = None
    stop: threading.Event | None = None
    repo: Path | None = None
    environ: Mapping[str, str] | None = None


ExecutorFactory = Callable[[Contract, ExecutorOptions], Executor]


class UnknownExecutorError(InfraRSIError, ValueError):
    """An executor name nobody registered."""

    exit_code = BAD_INPUT


class ExecutorSetupError(InfraRSIError, ValueError):
    """A registered executor that cannot be built here (a missing token or remote); the message says what to set."""

    exit_code = BAD_INPUT


def _local(contract: Contract, options: ExecutorOptions) -> Executor:
    from bot.executors.local import LocalExecutor

    return LocalExecutor(on_step=options.on_step, stop=options.stop)


def _torchrun(contract: Contract, options: ExecutorOptions) -> Executor:
    from bot.executors.torchrun import TorchrunExecutor

    return TorchrunExecutor(contract.launch, on_step=options.on_step, stop=options.stop)


def _slurm(contract: Contract, options: ExecutorOptions) -> Executor:
    from bot.executors.slurm.factory import slurm_executor

    return slurm_executor(contract, on_step=options.on_step, stop=options.stop,
                          environ=getattr(options, "environ", None))


def _actions(contract: Contract, options: ExecutorOptions) -> Executor:
    from bot.executors.actions import executor_for_repo
    from bot.workspace.errors import GitLayerError
    from infrarsi.seams.forge import ForgeError

    repo = options.repo or contract.root
    try:
        return executor_for_repo(repo, contract.launch.actions, environ=options.environ, on_step=options.on_step,
                                 stop=options.stop)
    except (ForgeError, GitLayerError, ValueError) as e:
        raise ExecutorSetupError(f"launch.executor = 'actions': {e} (see docs/github.md)") from None


EXECUTORS: dict[str, ExecutorFactory] = {
    "local": _local,
    "torchrun": _torchrun,
    "actions": _actions,
    "slurm": _slurm,
}


def executor_names() -> tuple[str, ...]:
    return tuple(EXECUTORS)


def select_executor(contract: Contract, name: str | None) -> Contract:
    """The contract with ``launch.executor`` set to ``name`` (a ``--executor`` override), so every stage
    that reads it (fingerprints, world size, the journal) sees the executor that really runs the trials.

    The contract file and its lock are untouched: the executor is how trials run, not what they compute.
    """
    if name is None or name == contract.launch.executor:
        return contract
    if name not in EXECUTORS:
        raise UnknownExecutorError(f"executor {name!r}: expected one of {', '.join(EXECUTORS)}")
    return replace(contract, launch=replace(contract.launch, executor=name))


def build_executor(contract: Contract, *, name: str | None = None,
                   options: ExecutorOptions | None = None) -> Executor:
    """The executor ``name`` (default: the contract's ``launch.executor``), built by its factory."""
    chosen = name or contract.launch.executor
    try:
        factory = EXECUTORS[chosen]
    except KeyError:
        raise UnknownExecutorError(f"executor {chosen!r}: expected one of {', '.join(EXECUTORS)}") from None
    return factory(select_executor(contract, chosen), options or ExecutorOptions())


def add_executor_argument(parser: argparse.ArgumentParser) -> None:
    """``--executor {local,torchrun,actions,slurm}`` on a verb that runs trials; ``args.executor`` is None when absent."""
    parser.add_argument("--executor", choices=executor_names(), default=None,
                        help="where trials run; overrides the contract's [launch] executor for this command "
                             "(actions: self-hosted GitHub Actions runners, settings in [launch.actions], "
                             "docs/github.md; slurm: batch jobs, settings in [launch.slurm], docs/distributed.md)")
