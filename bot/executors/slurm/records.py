"""What travels through the shared directory: the trial's launch (bot -> node) and each rank's record (node -> bot).

Both are versioned JSON. The launch (``spec.json``, mode 0600) carries the
bot's already-scrubbed environment, so nothing of the bot's reaches the job
through Slurm (``sbatch --export=NIL``: only ``SLURM_*``) and slurmctld's saved copy of the job
environment holds nothing of it either. Each rank's agent writes
``record.<rank>.json`` atomically when its candidate has ended; the bot merges
them (steps from rank 0, peak memory the maximum over ranks, the GPU's capacity the least).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.executors.witness.ranks import merged_witness
from infrarsi.seams.executor import Execution, KillReason, TrialSpec
from infrarsi.seams.executor_codec import (CODEC_VERSION, execution_facts, execution_from_dict, execution_to_dict,
                                           spec_from_dict as _codec_spec_from_dict, spec_to_dict as _codec_spec_to_dict)

SPEC_FILE = "spec.json"
SCRIPT_FILE = "job.sh"
BATCH_LOG = "slurm.out"
POINTER_FILE = "slurm-job.json"  # in the trial's log directory: which job ran it (read on --resume)

__all__ = ["BATCH_LOG", "POINTER_FILE", "SCRIPT_FILE", "SPEC_FILE", "execution_from_dict", "execution_to_dict",
           "merge_ranks", "read_json", "read_ranks", "record_file", "spec_from_dict", "spec_to_dict", "write_json"]


def record_file(rank: int) -> str:
    return f"record.{rank}.json"


def write_json(path: Path, data: dict[str, Any], *, mode: int = 0o644) -> None:
    """Atomically: a reader on another node sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if int(data.get("schema_version", 1)) > CODEC_VERSION:
        raise ValueError(f"{path}: schema {data['schema_version']} is newer than this InfraRSI ({CODEC_VERSION})")
    return data


def spec_to_dict(spec: TrialSpec, *, base_env: dict[str, str], world_size: int, tasks_per_node: int) -> dict[str, Any]:
    """The launch (infrarsi.seams.executor_codec) and what the agents need beside it."""
    return {**_codec_spec_to_dict(spec), "base_env": base_env, "world_size": world_size,
            "tasks_per_node": tasks_per_node}


def spec_from_dict(data: dict[str, Any]) -> TrialSpec:
    return _codec_spec_from_dict({k: data[k] for k in ("schema_version", "spec") if k in data})


def read_ranks(job_dir: Path) -> dict[int, tuple[Execution, dict[str, Any]]]:
    """Every rank's record found in ``job_dir``: rank -> (execution, the facts beside it)."""
    out: dict[int, tuple[Execution, dict[str, Any]]] = {}
    for path in job_dir.glob("record.*.json"):
        data = read_json(path)
        if data is None:
            continue
        facts = execution_facts(data)
        out[int(facts.get("rank", path.name.split(".")[1]))] = (execution_from_dict(data), facts)
    return out


_KILL_ORDER: tuple[KillReason, ...] = ("memory", "timeout", "interrupt")


def merge_ranks(ranks: dict[int, Execution]) -> Execution | None:
    """One execution for the whole job: rank 0's steps, the maximum peak over ranks, the first rank that failed,
    every rank's witness report.

    A rank that exited non-zero on its own is the failure; ranks killed by a signal
    afterwards (``srun --kill-on-bad-exit`` stops the rest) are collateral. So is whatever the other ranks did
    once rank 0's agent, having seen every step the trial measures, ended its job (a long job is stopped so;
    its peers then lose their collective and are stopped by srun): only their memory or time limits count.
    """
    if not ranks:
        return None
    first = ranks.get(0) or ranks[min(ranks)]
    done = first.stopped_after_steps and first.killed_for is None
    judged = {r: e for r, e in ranks.items() if not done or e is first}
    killed = next((k for k in _KILL_ORDER if any(e.killed_for == k for e in ranks.values())
                   and (k != "interrupt" or any(e.killed_for == k for e in judged.values()))), None)
    own = [r for r in sorted(judged) if judged[r].returncode not in (0, None) and judged[r].returncode > 0]
    signalled = [r for r in sorted(judged) if judged[r].returncode not in (0, None)
                 and not judged[r].stopped_after_steps]
    failed = own[0] if own else (signalled[0] if signalled else None)
    culprit = ranks[failed] if failed is not None else first
    oom = next((e.probe_oom for e in ranks.values() if e.probe_oom), None)
    device_peaks = [e.device_peak_mem_bytes for e in ranks.values() if e.device_peak_mem_bytes is not None]
    steady = [e.steady_rss_bytes for e in ranks.values() if e.steady_rss_bytes]
    device_steady = [e.device_steady_bytes for e in ranks.values() if e.device_steady_bytes]
    capacities = [e.device_capacity_bytes for e in ranks.values() if e.device_capacity_bytes]
    return replace(first, returncode=culprit.returncode, killed_for=killed,
                   peak_rss_bytes=max(e.peak_rss_bytes for e in ranks.values()),
                   stderr_tail=culprit.stderr_tail, probe_oom=oom,
                   device_peak_mem_bytes=max(device_peaks) if device_peaks else None,
                   steady_rss_bytes=max(steady) if steady else None,
                   device_steady_bytes=max(device_steady) if device_steady else None,
                   device_capacity_bytes=min(capacities) if capacities else None,
                   pids=tuple(sorted({p for e in ranks.values() for p in e.pids})),
                   wall_s=max(e.wall_s for e in ranks.values()),
                   failed_rank=failed if len(ranks) > 1 or failed not in (None, 0) else None,
                   **merged_witness(ranks), lock_changed=_merged_lock(ranks))


def _merged_lock(ranks: dict[int, Execution]) -> tuple[str, ...] | None:
    """Every locked file any rank's agent found changed; None when no agent checked."""
    checked = [e.lock_changed for e in ranks.values() if e.lock_changed is not None]
    return tuple(sorted({p for c in checked for p in c})) if checked else None
