"""The compute-node side: ``python -m bot.executors.slurm.agent --job-dir DIR``, one per rank.

Slurm starts it (in the batch step, or as an ``srun`` task per rank); it is the
candidate's parent there. It runs the candidate through the local executor —
the scrubbed environment the bot computed, its own process group, the memory
limit and timeout of the spec, step events stamped by this agent's monotonic
clock as they arrive — and writes ``record.<rank>.json`` into the shared job
directory with the node, the job id and the rank. It exits with the candidate's
failure so that ``srun --kill-on-bad-exit`` stops the other ranks.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path

from bot.executors.local import LocalExecutor
from bot.executors.slurm.records import (
    SPEC_FILE,
    execution_to_dict,
    read_json,
    record_file,
    spec_from_dict,
    write_json,
)

# What the node itself decides and the job must see (the rest of the environment comes from the bot).
NODE_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def rank_env(environ: dict[str, str], *, world_size: int, tasks_per_node: int) -> dict[str, str]:
    """The torch.distributed variables of this rank, from Slurm's (what torchrun would have set)."""
    if world_size <= 1:
        return {}
    out = {"RANK": environ.get("SLURM_PROCID", "0"), "WORLD_SIZE": str(world_size),
           "LOCAL_RANK": environ.get("SLURM_LOCALID", "0"), "LOCAL_WORLD_SIZE": str(tasks_per_node),
           "GROUP_RANK": environ.get("SLURM_NODEID", "0"), "NODE_RANK": environ.get("SLURM_NODEID", "0"),
           "MASTER_ADDR": environ.get("MASTER_ADDR", "127.0.0.1"), "MASTER_PORT": environ.get("MASTER_PORT", "29500")}
    if out["MASTER_ADDR"].startswith("127.") and "GLOO_SOCKET_IFNAME" not in environ:
        out["GLOO_SOCKET_IFNAME"] = "lo"  # every "node" is this machine: keep gloo on loopback
    return out


def run(job_dir: Path) -> int:
    data = read_json(job_dir / SPEC_FILE)
    if data is None:
        print(f"infrarsi agent: no readable {SPEC_FILE} in {job_dir}", file=sys.stderr)
        return 2
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    spec = spec_from_dict(data)
    base = dict(data["base_env"])
    base.update({k: v for k, v in os.environ.items() if k.startswith("SLURM_") or k in NODE_VARS})
    extra = dict(spec.env)
    extra.update(rank_env(dict(os.environ), world_size=int(data["world_size"]),
                          tasks_per_node=int(data["tasks_per_node"])))
    log_dir = job_dir / f"rank{rank}"
    executor = LocalExecutor(base_env=base, sample_interval_s=0.05)

    received: list[str] = []

    def stop(signum: int, frame: object) -> None:  # scancel, time limit, preemption: end the trial, keep the record
        del frame
        received.append(signal.Signals(signum).name)
        executor.interrupt()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    execution = executor.execute(replace(spec, env=tuple(extra.items()), log_dir=str(log_dir)))
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if received and execution.killed_for == "interrupt":
        # who stopped this rank is then in its record: scancel and the time limit, but also srun ending the step
        execution = replace(execution, stderr_tail=(execution.stderr_tail + f"\ninfrarsi agent, rank {rank} on {node}: "
                                                    f"{received[0]} while the trial ran; the trial was stopped").strip())
    write_json(job_dir / record_file(rank),
               execution_to_dict(execution, rank=rank, node=node, hostname=socket.gethostname(),
                                 job_id=os.environ.get("SLURM_JOB_ID"), step_id=os.environ.get("SLURM_STEP_ID")))
    if execution.returncode == 0 and execution.killed_for is None:
        return 0
    # Also when this agent itself ended the job after its measured steps (returncode -15): non-zero on purpose,
    # so that srun --kill-on-bad-exit stops the peers, which may never print a step line of their own. The job
    # then reads FAILED in the scheduler's accounting; the records say it was the bot (records.merge_ranks).
    code = execution.returncode or 1
    return code if 0 < code < 256 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot.executors.slurm.agent",
                                     description="run one InfraRSI trial rank under Slurm and record it")
    parser.add_argument("--job-dir", required=True, help="the trial's directory on the shared filesystem")
    args = parser.parse_args(argv)
    return run(Path(args.job_dir))


if __name__ == "__main__":
    raise SystemExit(main())
