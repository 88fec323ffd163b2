"""The batch job a Slurm trial is submitted as: the ``sbatch`` line and the script (paths only, srun for ranks)."""

from __future__ import annotations

from pathlib import Path

from bot.executors.slurm.script import batch_script, sbatch_args, time_limit_min
from infrarsi.contract.model import SlurmLaunch


def test_the_sbatch_line_asks_for_the_contract_and_exports_nothing(tmp_path: Path) -> None:
    s = SlurmLaunch(partition="gpu", account="ml", nodes=2, tasks_per_node=4, gpus_per_node=4, memory_bytes=2**30,
                    sbatch_args=("--exclude=bad1",))
    args = sbatch_args(s, job_dir=tmp_path, name="infrarsi-r1-3", timeout_s=100, exclude=("n7",))
    assert args[0] == "--export=NIL"
    assert {"--job-name=infrarsi-r1-3", "--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--mem=1024M",
            "--partition=gpu", "--account=ml", "--time=3", "--no-requeue",
            f"--output={tmp_path}/slurm.out"} <= set(args)
    assert args.index("--exclude=n7") > args.index("--exclude=bad1")  # the bot's retry elsewhere wins
    assert args[-1] == str(tmp_path / "job.sh")
    assert time_limit_min(SlurmLaunch(time_limit_min=7), 10_000) == 7


def test_the_script_holds_paths_only_and_srun_for_several_ranks(tmp_path: Path) -> None:
    one = batch_script(SlurmLaunch(), job_dir=tmp_path, python="/venv/bin/python", slurm_conf="/etc/s.conf",
                       path="/usr/bin")
    assert "srun" not in one and one.rstrip().endswith(f"-m bot.executors.slurm.agent --job-dir {tmp_path}")
    many = batch_script(SlurmLaunch(nodes=2, tasks_per_node=2), job_dir=tmp_path, python="/venv/bin/python",
                        slurm_conf=None)
    assert "export SLURM_EXPORT_ENV=ALL" in many
    assert "exec srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=2 /venv/bin/python -m bot" in many


def test_time_limit_is_the_timeout_plus_a_minute_rounded_up() -> None:
    assert time_limit_min(SlurmLaunch(), 0) == 1
    assert time_limit_min(SlurmLaunch(), 60) == 2
    assert time_limit_min(SlurmLaunch(), 61) == 3


def test_defaults_ask_for_no_partition_gpu_or_memory(tmp_path: Path) -> None:
    args = sbatch_args(SlurmLaunch(requeue=True), job_dir=tmp_path, name="n", timeout_s=30)
    assert "--requeue" in args and "--no-requeue" not in args
    assert not [a for a in args if a.startswith(("--partition", "--gpus", "--mem", "--exclude", "--account"))]
    assert sbatch_args(SlurmLaunch(memory_bytes=10), job_dir=tmp_path, name="n", timeout_s=1)[-2] == "--mem=1M"


def test_paths_with_spaces_are_quoted_and_the_conf_and_path_exported(tmp_path: Path) -> None:
    job = tmp_path / "a job"
    text = batch_script(SlurmLaunch(), job_dir=job, python="/opt/my py/python", slurm_conf="/etc/s.conf",
                        path="/usr/bin:/bin")
    assert text.startswith("#!/bin/bash\n") and text.endswith("\n")
    assert f"exec '/opt/my py/python' -m bot.executors.slurm.agent --job-dir '{job}'" in text
    assert "export SLURM_CONF=/etc/s.conf" in text and "export PATH=/usr/bin:/bin" in text
    assert "SLURM_CONF" not in batch_script(SlurmLaunch(), job_dir=job, python="p", slurm_conf=None)
