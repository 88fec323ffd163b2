"""The Slurm executor's pure parts, without a cluster: ``[launch.slurm]``, the sbatch line, the script,
``scontrol`` parsing and the merge of the ranks' records. The cluster tests are test_executor_slurm*.py."""

from __future__ import annotations

import tomllib
from datetime import datetime
from pathlib import Path

import pytest

from bot.executors.registry import build_executor
from bot.executors.slurm.cli import parse_job
from bot.executors.slurm.executor import client_environment, job_name
from bot.executors.slurm.records import merge_ranks
from bot.executors.slurm.script import batch_script, sbatch_args, time_limit_min
from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import parse_contract
from infrarsi.contract.model import SlurmLaunch
from infrarsi.seams.executor import Execution, TrialSpec
from infrarsi.trial_record import StepEvent
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


def test_the_sbatch_line_asks_for_the_contract_and_exports_nothing(tmp_path: Path) -> None:
    s = SlurmLaunch(partition="gpu", account="ml", nodes=2, tasks_per_node=4, gpus_per_node=4, memory_bytes=2**30,
                    sbatch_args=("--exclude=bad1",))
    args = sbatch_args(s, job_dir=tmp_path, name="infrarsi-r1-3", timeout_s=100, exclude=("n7",))
    assert args[0] == "--export=NIL"
    assert {"--job-name=infrarsi-r1-3", "--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--mem=1024M",
            "--partition=gpu", "--account=ml", "--time=3", "--no-requeue", f"--output={tmp_path}/slurm.out"} <= set(args)
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


def _ex(**kw: object) -> Execution:
    return Execution(**{"events": (), "returncode": 0, "wall_s": 1.0, "peak_rss_bytes": 0, **kw})  # type: ignore[arg-type]


def test_ranks_merge_into_one_execution() -> None:
    steps = (StepEvent(step=1, stamp=1.0), StepEvent(step=2, stamp=2.0))
    ok = merge_ranks({0: _ex(events=steps, peak_rss_bytes=100, pids=(1,)), 1: _ex(peak_rss_bytes=300, pids=(2,))})
    assert ok is not None and ok.events == steps and ok.peak_rss_bytes == 300 and ok.pids == (1, 2)
    assert ok.returncode == 0 and ok.failed_rank is None
    # rank 1 failed on its own; rank 0 was stopped by srun afterwards
    crashed = merge_ranks({0: _ex(returncode=-9, stderr_tail="killed"), 1: _ex(returncode=1, stderr_tail="boom")})
    assert crashed is not None and (crashed.returncode, crashed.failed_rank, crashed.stderr_tail) == (1, 1, "boom")
    oom = merge_ranks({0: _ex(returncode=-9), 1: _ex(returncode=-9, killed_for="memory", peak_rss_bytes=9)})
    assert oom is not None and oom.killed_for == "memory" and oom.peak_rss_bytes == 9
    assert merge_ranks({}) is None
    # GPU memory: the fullest rank's peak and held memory, the tightest rank's capacity
    gpus = merge_ranks({0: _ex(device_peak_mem_bytes=50, device_steady_bytes=30, device_capacity_bytes=79),
                        1: _ex(device_peak_mem_bytes=60, device_steady_bytes=35, device_capacity_bytes=78),
                        2: _ex()})
    assert gpus is not None
    assert (gpus.device_peak_mem_bytes, gpus.device_steady_bytes, gpus.device_capacity_bytes) == (60, 35, 78)
    single = merge_ranks({0: _ex(returncode=1)})
    assert single is not None and single.failed_rank is None


def test_ranks_stopped_after_rank_0_saw_every_step_are_collateral_and_every_rank_reports() -> None:
    # rank 0's agent ended its job after the measured steps; rank 1 lost its collective and srun stopped it
    done = merge_ranks({0: _ex(returncode=-15, stopped_after_steps=True, witness={"rank": "0", "flops": 1},
                               lock_changed=()),
                        1: _ex(returncode=-9, killed_for="interrupt", witness={"rank": "1", "flops": 1},
                               lock_changed=())})
    assert done is not None and done.killed_for is None and done.failed_rank is None and done.stopped_after_steps
    assert [w["rank"] for w in done.witness_ranks] == [0, 1] and done.witness == {"rank": 0, "flops": 1}
    assert done.lock_changed == ()
    # a rank over its memory limit is not collateral, and a rank that found a locked file changed is named
    oom = merge_ranks({0: _ex(returncode=-15, stopped_after_steps=True, lock_changed=()),
                       1: _ex(returncode=-9, killed_for="memory", lock_changed=("harness.py",))})
    assert oom is not None and oom.killed_for == "memory" and oom.lock_changed == ("harness.py",)
    # one rank's witness could not be trusted: the trial says which
    spoofed = merge_ranks({0: _ex(witness={"flops": 1}), 1: _ex(witness_error="a witness report failed "
                                                                 "authentication (spoofed)")})
    assert spoofed is not None and spoofed.witness_error == "rank 1: a witness report failed authentication (spoofed)"
