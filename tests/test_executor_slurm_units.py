"""The Slurm executor's pure parts, without a cluster: ``[launch.slurm]``, the sbatch line, the script,
``scontrol`` parsing. The script and the ranks' records: test_slurm_script.py, test_slurm_records.py; the cluster
tests are test_executor_slurm*.py."""

from __future__ import annotations

import tomllib
from datetime import datetime
from pathlib import Path

import pytest

from bot.executors.registry import build_executor
from bot.executors.slurm.cli import parse_job
from bot.executors.slurm.executor import client_environment, job_name
from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import parse_contract
from infrarsi.contract.model import SlurmLaunch
from infrarsi.seams.executor import TrialSpec
from tests.support.tinygpt import REPO

DDP = REPO / "fixtures" / "ddp"


def _contract(launch: dict):  # noqa: ANN202
    data = tomllib.loads((DDP / "infrarsi.toml").read_text())
    data["launch"] = launch
    return parse_contract(data, source=Path("infrarsi.toml"), root=DDP)


def test_launch_slurm_is_read_with_every_key() -> None:
    c = _contract({"executor": "slurm", "slurm": {
        "partition": "gpu", "account": "ml", "qos": "high", "nodes": 2, "tasks_per_node": 8, "gpus_per_node": 8,
        "gres": "gpu:h100:8", "cpus_per_task": 12, "time_limit": "1-02:03:04", "memory": "400GiB",
        "sbatch_args": ["--constraint=h100"], "workdir": "/shared/x", "requeue": True, "retry_node_fail": True,
        "poll_s": 5}})
    s = c.launch.slurm
    assert s == SlurmLaunch(partition="gpu", account="ml", qos="high", nodes=2, tasks_per_node=8, gpus_per_node=8,
                            gres="gpu:h100:8", cpus_per_task=12, time_limit_min=26 * 60 + 4, memory_bytes=400 * 2**30,
                            sbatch_args=("--constraint=h100",), workdir="/shared/x", requeue=True,
                            retry_node_fail=True, poll_s=5.0)
    assert c.launch.world_size == 16 and s.devices == 16
    assert _contract({"executor": "slurm"}).launch.slurm == SlurmLaunch()


@pytest.mark.parametrize("value, minutes", [(5, 5), ("90", 90), ("1:30", 2), ("0:00:30", 1), ("2:00:00", 120),
                                            ("1-00", 1440), ("0-00:10", 10)])
def test_time_limits_read_as_slurm_reads_them(value: object, minutes: int) -> None:
    assert _contract({"executor": "slurm", "slurm": {"time_limit": value}}).launch.slurm.time_limit_min == minutes


@pytest.mark.parametrize("launch, message", [
    ({"executor": "slurm", "slurm": {"node": 2}}, "launch.slurm.node: unknown key (did you mean 'nodes'?)"),
    ({"executor": "local", "slurm": {"nodes": 2}}, None),
    ({"executor": "slurm", "nnodes": 2, "rdzv_endpoint": "a:1"}, "launch.nnodes: expected 1 with launch.executor"),
    ({"executor": "slurm", "slurm": {"time_limit": "soon"}}, "launch.slurm.time_limit: expected whole minutes"),
    ({"executor": "slurm", "slurm": {"time_limit": 0}}, "launch.slurm.time_limit: expected whole minutes"),
    ({"executor": "slurm", "slurm": {"memory": "lots"}}, "launch.slurm.memory: expected a size per node"),
    ({"executor": "slurm", "slurm": {"tasks_per_node": 0}}, "launch.slurm.tasks_per_node: expected an integer >= 1"),
    ({"executor": "slurm", "slurm": {"sbatch_args": ["--export=ALL"]}},
     "launch.slurm.sbatch_args[0]: '--export=ALL' is set by the Slurm executor itself"),
])
def test_bad_launch_slurm_names_the_key(launch: dict, message: str | None) -> None:
    if message is None:  # read under any executor: `--executor slurm` on a verb may pick it
        assert _contract(launch).launch.slurm.nodes == 2
        return
    with pytest.raises(ContractError) as e:
        _contract(launch)
    assert message in str(e.value)


def test_the_registry_builds_it_with_the_repo_workdir() -> None:
    ex = build_executor(_contract({"executor": "slurm", "slurm": {"nodes": 2}}))
    assert ex.name == "slurm" and ex.workdir == DDP / ".infrarsi" / "slurm" and ex.settings.nodes == 2


def test_clients_run_with_a_minimal_environment() -> None:
    env = client_environment({"PATH": "/bin", "SLURM_CONF": "/c", "GITHUB_TOKEN": "x", "SBATCH_ACCOUNT": "a",
                              "AWS_SECRET_ACCESS_KEY": "y", "HOME": "/root"})
    assert env == {"PATH": "/bin", "SLURM_CONF": "/c", "SBATCH_ACCOUNT": "a", "HOME": "/root"}
    assert job_name(TrialSpec(argv=("x",), cwd=".", log_dir="/r/.infrarsi/logs/run-7/12")) == "infrarsi-run-7-12"
    assert job_name(TrialSpec(argv=("x",), cwd=".")) == "infrarsi-trial"


def test_scontrol_lines_are_parsed() -> None:
    line = ("JobId=27610003 JobName=infrarsi-s-1 UserId=root(0) JobState=OUT_OF_MEMORY Reason=OutOfMemory "
            "Dependency=(null) Requeue=0 Restarts=0 ExitCode=0:125 RunTime=00:01:05 TimeLimit=00:02:00 "
            "SubmitTime=2026-12-03T19:09:10 StartTime=2026-12-03T19:09:11 EndTime=2026-12-03T19:10:16 "
            "NodeList=n[1-2] BatchHost=n1 AllocTRES=cpu=2,mem=200M,node=2,billing=2")
    job = parse_job(line)
    assert (job.job_id, job.state, job.exit_code, job.node_list, job.batch_host) == (
        "27610003", "OUT_OF_MEMORY", "0:125", "n[1-2]", "n1")
    assert job.pending_s == 1.0 and job.elapsed_s == 65.0 and job.run_time_s == 65
    assert job.mem_bytes == 200 * 2**20 and job.terminal
    assert job.start_time == datetime(2026, 12, 3, 19, 9, 11)
    assert not parse_job("JobId=1 JobState=RUNNING RunTime=1-00:00:01").terminal
    assert parse_job("JobId=1 JobState=RUNNING RunTime=1-00:00:01").run_time_s == 86401
