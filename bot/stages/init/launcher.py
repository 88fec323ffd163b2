"""A distributed launcher at the front of the user's command, read into the contract's ``[launch]`` table.

Most multi-GPU training is started as ``torchrun --nproc_per_node=8 train.py ...``
(or ``python -m torch.distributed.run``). Taken as the workload's command, the
launcher would be one opaque process to the bot: the world size unknown (so no
parallel layout, no per-rank peak, no divisibility check) and every parallel trial
racing for torchrun's default port 29500. So ``init`` takes the launcher's own
options into ``[launch]`` (executor ``torchrun``) and keeps the program after it as
the workload; the torchrun executor then starts every trial the same way, on a
port of its own. Launchers that change more than where ranks run (DeepSpeed's and
Accelerate's pass ``--local_rank`` or set the precision) are refused with what to
write instead; so is an elastic node range or a process count torchrun would pick
itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from infrarsi.contract.entry import PYTHONS
from infrarsi.errors import BAD_INPUT, InfraRSIError

#: torchrun's options that take no value (spelled with ``_`` here; ``-`` is the same option).
_SWITCHES = frozenset({"standalone", "no_python", "run_path", "use_env", "module"})
_OTHER_LAUNCHERS = {
    "deepspeed": "DeepSpeed's launcher passes --local_rank to the script",
    "accelerate": "Accelerate's launcher also sets the mixed precision and the distributed backend",
}


class LaunchError(InfraRSIError, ValueError):
    """The launcher's options cannot become a ``[launch]`` table; the message says what to pass instead."""

    exit_code = BAD_INPUT


@dataclass(frozen=True, kw_only=True, slots=True)
class DraftedLaunch:
    """The ``[launch]`` table a launcher's options amount to, with a note for each field."""

    table: dict[str, Any]
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return int(self.table.get("nproc_per_node", 1)) * int(self.table.get("nnodes", 1))

    @property
    def ranks_per_node(self) -> int:
        return int(self.table.get("nproc_per_node", 1))

    def write(self, draft: Any) -> None:
        """Set ``launch.*`` in a :class:`~bot.stages.init.draft.ContractDraft`, each field with its note."""
        for key, value in self.table.items():
            draft.set(f"launch.{key}", value, self.notes.get(f"launch.{key}", ""))


def split_launcher(argv: Sequence[str]) -> tuple[DraftedLaunch | None, list[str]]:
    """(the launch, the program and its arguments) for ``argv``; (None, argv) when no launcher leads it."""
    argv = list(argv)
    if not argv:
        return None, argv
    head = os.path.basename(argv[0])
    if head in _OTHER_LAUNCHERS:
        raise LaunchError(f"{head}: {_OTHER_LAUNCHERS[head]}, which InfraRSI's executors do not do; pass the "
                          "command without the launcher and write [launch] executor = \"torchrun\" and "
                          "nproc_per_node = N in infrarsi.toml by hand (docs/contract.md)")
    if head == "torchrun":
        return _torchrun(argv[1:], "torchrun")
    if PYTHONS.match(argv[0]) and argv[1:3] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
        return _torchrun(argv[3:], argv[2])
    return None, argv


def _torchrun(args: list[str], launcher: str) -> tuple[DraftedLaunch, list[str]]:
    options: dict[str, str | None] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name == "m":
            name = "module"
        if name in _SWITCHES:
            options[name] = None
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise LaunchError(f"{launcher}: --{name} needs a value")
            value = args[i + 1]
            i += 1
        options[name] = value
        i += 1
    program = args[i:]
    if not program:
        raise LaunchError(f"{launcher}: no training script after its options")
    if "module" in options or "no_python" in options:
        raise LaunchError(f"{launcher}: --module/--no-python starts something other than a script; pass "
                          "\"torchrun ... train.py ...\" (the bot runs the script with this interpreter)")
    if launcher == "torch.distributed.launch" and "use_env" not in options:
        raise LaunchError("torch.distributed.launch passes --local_rank to the script unless --use-env is given; "
                          "use torchrun (it sets LOCAL_RANK instead), or add --use-env if the script reads it")
    return _table(options, launcher), ["python", *program]


def _count(options: dict[str, str | None], name: str, launcher: str, default: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        hint = ("an elastic range: the bot measures a fixed world size, give the number of nodes"
                if ":" in raw else "give the number of processes per node (the bot measures a fixed world size)")
        raise LaunchError(f"{launcher}: --{name} {raw}: {hint}")
    return int(raw)


def _table(options: dict[str, str | None], launcher: str) -> DraftedLaunch:
    nproc = _count(options, "nproc_per_node", launcher, 1)
    nnodes = _count(options, "nnodes", launcher, 1)
    table: dict[str, Any] = {"executor": "torchrun", "nproc_per_node": nproc}
    notes = {"launch.executor": f"from the command: {launcher}; every trial is started the same way, on a "
                                "rendezvous port of its own",
             "launch.nproc_per_node": f"from the command: {launcher} --nproc-per-node {nproc}"}
    if nnodes > 1:
        table["nnodes"] = nnodes
        notes["launch.nnodes"] = f"from the command: --nnodes {nnodes}"
    endpoint = options.get("rdzv_endpoint")
    if endpoint is None and options.get("master_addr"):
        endpoint = f"{options['master_addr']}:{options.get('master_port') or 29500}"
    for name in ("node_rank", "rdzv_backend", "rdzv_id"):
        if options.get(name) is not None:
            raw = options[name]
            table[name] = int(raw) if name == "node_rank" and raw.isdigit() else raw
            notes[f"launch.{name}"] = f"from the command: --{name.replace('_', '-')} {raw}"
    if nnodes > 1:
        if endpoint is None:
            raise LaunchError(f"{launcher}: --nnodes {nnodes} without --rdzv-endpoint (or --master-addr): every "
                              "node must meet at the same host:port; add it to the command")
        table["rdzv_endpoint"] = endpoint
        notes["launch.rdzv_endpoint"] = f"from the command: {endpoint}"
    # one node: the executor picks a free loopback port per trial (the command's own would collide)
    return DraftedLaunch(table=table, notes=notes)
