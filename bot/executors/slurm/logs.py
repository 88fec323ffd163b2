"""A finished job's logs, copied from its shared directory into the trial's log directory."""

from __future__ import annotations

import shutil
from pathlib import Path

from bot.executors.slurm.records import BATCH_LOG


def copy_logs(job_dir: Path, log_dir: Path) -> None:
    """Rank 0's logs as the trial's own (as the local executor writes them), the other ranks' beside them."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for rank_dir in sorted(job_dir.glob("rank*")):
        rank = rank_dir.name[len("rank"):]
        for stream in ("stdout", "stderr"):
            src = rank_dir / f"{stream}.log"
            if src.is_file():
                shutil.copyfile(src, log_dir / (f"{stream}.log" if rank == "0" else f"rank{rank}.{stream}.log"))
    if (job_dir / BATCH_LOG).is_file():
        shutil.copyfile(job_dir / BATCH_LOG, log_dir / BATCH_LOG)
