"""A finished Slurm job's logs, copied into the trial's log directory: rank 0's as the trial's own."""

from __future__ import annotations

from pathlib import Path

from bot.executors.slurm.logs import copy_logs
from bot.executors.slurm.records import BATCH_LOG


def test_rank_0_logs_are_the_trials_and_the_others_sit_beside_them(tmp_path: Path) -> None:
    job = tmp_path / "job"
    for rank in (0, 1):
        (job / f"rank{rank}").mkdir(parents=True)
        (job / f"rank{rank}" / "stdout.log").write_text(f"out {rank}\n")
        (job / f"rank{rank}" / "stderr.log").write_text(f"err {rank}\n")
    (job / BATCH_LOG).write_text("batch\n")
    logs = tmp_path / "logs" / "run-1" / "3"
    copy_logs(job, logs)
    assert sorted(p.name for p in logs.iterdir()) == [
        "rank1.stderr.log", "rank1.stdout.log", "slurm.out", "stderr.log", "stdout.log"]
    assert (logs / "stdout.log").read_text() == "out 0\n" and (logs / "rank1.stderr.log").read_text() == "err 1\n"
    assert (logs / BATCH_LOG).read_text() == "batch\n"


def test_missing_logs_are_skipped(tmp_path: Path) -> None:
    job = tmp_path / "job"
    (job / "rank0").mkdir(parents=True)
    (job / "rank0" / "stderr.log").write_text("only err")
    copy_logs(job, tmp_path / "logs")
    assert [p.name for p in (tmp_path / "logs").iterdir()] == ["stderr.log"]
    copy_logs(tmp_path / "no-such-job", tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []
