"""The compute-node agent's pure parts: each rank's torch.distributed variables from Slurm's, and its refusal
without a launch. The agent running a job under Slurm: test_executor_contract.py[slurm], test_executor_slurm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.executors.slurm.agent import main, rank_env


def test_one_rank_gets_no_distributed_variables() -> None:
    assert rank_env({"SLURM_PROCID": "0"}, world_size=1, tasks_per_node=1) == {}


def test_a_rank_gets_what_torchrun_would_have_set() -> None:
    env = rank_env({"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "MASTER_ADDR": "10.0.0.5",
                    "MASTER_PORT": "4000"}, world_size=4, tasks_per_node=2)
    assert env == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                   "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "4000"}


def test_loopback_ranks_keep_gloo_on_lo_unless_told_otherwise() -> None:
    env = rank_env({}, world_size=2, tasks_per_node=1)
    assert (env["RANK"], env["MASTER_ADDR"], env["MASTER_PORT"], env["GLOO_SOCKET_IFNAME"]) == (
        "0", "127.0.0.1", "29500", "lo")
    assert "GLOO_SOCKET_IFNAME" not in rank_env({"GLOO_SOCKET_IFNAME": "eth0"}, world_size=2, tasks_per_node=1)


def test_no_readable_spec_is_exit_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--job-dir", str(tmp_path)]) == 2
    assert f"infrarsi agent: no readable spec.json in {tmp_path}" in capsys.readouterr().err
