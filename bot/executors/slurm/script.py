"""The batch job of one trial: the ``sbatch`` arguments and the script Slurm runs.

The script only finds the rendezvous (multi-rank: the first node's address and
a free port there) and starts our agent, directly or as one ``srun`` task per
rank; the candidate's own command line and environment travel in
``spec.json``, never through Slurm.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import bot
from bot.executors.slurm.records import BATCH_LOG, SCRIPT_FILE
from infrarsi.contract.model import SlurmLaunch

# The directory that holds the ``bot`` package: the agent imports it on the node (a shared install).
SOURCE_ROOT = Path(bot.__file__).resolve().parent.parent


def time_limit_min(settings: SlurmLaunch, timeout_s: float) -> int:
    """The job's ``--time`` in minutes: the contract's, else the trial's timeout plus a minute for start-up.

    Slurm counts whole minutes and checks every 30 s, so this is a backstop; the
    agent's own timeout ends a slow trial to the second.
    """
    if settings.time_limit_min is not None:
        return settings.time_limit_min
    return max(1, math.ceil((timeout_s + 60.0) / 60.0))


def sbatch_args(settings: SlurmLaunch, *, job_dir: Path, name: str, timeout_s: float,
                exclude: tuple[str, ...] = ()) -> list[str]:
    """Everything after ``sbatch --parsable``: resources from ``[launch.slurm]``, then the script."""
    s = settings
    args = ["--export=NIL", f"--job-name={name}", f"--output={job_dir / BATCH_LOG}", f"--chdir={job_dir}",
            f"--nodes={s.nodes}", f"--ntasks-per-node={s.tasks_per_node}",
            f"--time={time_limit_min(s, timeout_s)}", "--requeue" if s.requeue else "--no-requeue"]
    for flag, value in (("--partition", s.partition), ("--account", s.account), ("--qos", s.qos),
                        ("--gres", s.gres), ("--cpus-per-task", s.cpus_per_task)):
        if value is not None:
            args.append(f"{flag}={value}")
    if s.gpus_per_node:
        args.append(f"--gpus-per-node={s.gpus_per_node}")
    if s.memory_bytes is not None:
        args.append(f"--mem={max(1, s.memory_bytes // 2**20)}M")
    args += list(s.sbatch_args)
    if exclude:  # after the contract's own arguments: the bot's retry elsewhere wins
        args.append(f"--exclude={','.join(exclude)}")
    return args + [str(job_dir / SCRIPT_FILE)]


def batch_script(settings: SlurmLaunch, *, job_dir: Path, python: str, slurm_conf: str | None,
                 path: str | None = None) -> str:
    """The script: no secret in it (slurmctld keeps a copy), only paths and the agent's command line."""
    q = shlex.quote
    agent = f"{q(python)} -m bot.executors.slurm.agent --job-dir {q(str(job_dir))}"
    lines = [
        "#!/bin/bash",
        "# An InfraRSI trial: our agent supervises the candidate (one per rank) and writes its record here.",
        "set -u",
        # --export=NIL/NONE export SLURM_EXPORT_ENV, which would leave srun's tasks without even PATH
        "export SLURM_EXPORT_ENV=ALL",
        f"export PYTHONPATH={q(str(SOURCE_ROOT))}",
    ]
    if path:  # --export=NIL starts the script without PATH: the bot's, to find srun and scontrol
        lines.append(f"export PATH={q(path)}")
    if slurm_conf:
        lines.append(f"export SLURM_CONF={q(slurm_conf)}")
    if settings.world_size <= 1:
        lines.append(f"exec {agent}")
    else:
        lines += [
            'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            'MASTER_ADDR=$(scontrol show node "$first" | sed -n "s/.*NodeAddr=\\([^ ]*\\).*/\\1/p")',
            'export MASTER_ADDR=${MASTER_ADDR:-$first}',
            f"export MASTER_PORT=$({q(python)} -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); "
            "print(s.getsockname()[1])')",
            f"exec srun --kill-on-bad-exit=1 --nodes={settings.nodes} "
            f"--ntasks-per-node={settings.tasks_per_node} {agent}",
        ]
    return "\n".join(lines) + "\n"
