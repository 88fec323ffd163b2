"""The torchrun executor's launch line, the contract's [launch] table and the fingerprints it feeds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.executors.torchrun import _ROOT_CAUSE, TorchrunExecutor, torchrun_argv
from bot.executors.registry import ExecutorOptions, build_executor
from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import parse_contract
from infrarsi.contract.model import Launch

BASE = {"workload": {"command": "python train.py", "tokens_per_step": 64}}


def _contract(tmp_path: Path, **tables):
    (tmp_path / "train.py").write_text("")
    return parse_contract({**BASE, **tables}, source=tmp_path / "infrarsi.toml", root=tmp_path)


def test_single_node_rendezvous_is_on_loopback() -> None:
    argv = torchrun_argv(Launch(executor="torchrun", nproc_per_node=2), ("python", "train.py", "--steps", "8"),
                         endpoint="127.0.0.1:29500", run_id="r1")
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    joined = " ".join(argv)
    assert "--nnodes 1 --nproc-per-node 2 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29500" in joined
    assert "--rdzv-id r1" in joined and "--max-restarts 0" in joined and "--local-addr 127.0.0.1" in joined
    assert argv[-4:] == ["python", "train.py", "--steps", "8"]


def test_multi_node_parameters_pass_through_from_the_contract(tmp_path: Path) -> None:
    contract = _contract(tmp_path, launch={"executor": "torchrun", "nproc_per_node": 8, "nnodes": 2, "node_rank": 1,
                                           "rdzv_endpoint": "node0.cluster:29400", "rdzv_id": "job-7"})
    launch = contract.launch
    assert launch.world_size == 16
    argv = torchrun_argv(launch, ("python", "train.py"), endpoint=launch.rdzv_endpoint or "", run_id="ignored")
    joined = " ".join(argv)
    assert "--nnodes 2 --nproc-per-node 8 --node-rank 1 --rdzv-backend c10d --rdzv-endpoint node0.cluster:29400" \
        in joined
    assert "--rdzv-id job-7" in joined and "--local-addr" not in joined


@pytest.mark.parametrize(("launch", "key", "words"), [
    ({"executor": "torchrun", "nnodes": 2}, "launch.rdzv_endpoint", "missing"),
    ({"executor": "torchrun", "nnodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1"}, "launch.node_rank", "[0, nnodes"),
    ({"executor": "local", "nproc_per_node": 2}, "launch.nproc_per_node", "executor = 'torchrun'"),
    ({"executor": "torchrun", "rdzv_endpoint": "no-port"}, "launch.rdzv_endpoint", "HOST:PORT"),
    ({"executor": "mpirun"}, "launch.executor", "one of 'local', 'torchrun'"),
    ({"executor": "torchrun", "nproc": 2}, "launch.nproc", "unknown key"),
    ({"executor": "torchrun", "nproc_per_node": 0}, "launch.nproc_per_node", ">= 1"),
])
def test_launch_errors_name_the_file_and_key(tmp_path: Path, launch: dict, key: str, words: str) -> None:
    with pytest.raises(ContractError) as err:
        _contract(tmp_path, launch=launch)
    assert err.value.key == key and words in err.value.message
    assert str(err.value).startswith(str(tmp_path / "infrarsi.toml"))


def test_moe_workload_fields(tmp_path: Path) -> None:
    contract = _contract(tmp_path, workload={**BASE["workload"], "family": "moe", "experts": 8, "top_k": 2})
    assert (contract.workload.experts, contract.workload.top_k) == (8, 2)
    with pytest.raises(ContractError) as err:
        _contract(tmp_path, workload={**BASE["workload"], "family": "moe", "experts": 2, "top_k": 4})
    assert err.value.key == "workload.top_k"


def test_a_torchrun_contract_builds_the_torchrun_executor(tmp_path: Path) -> None:
    import threading

    stop = threading.Event()
    ddp = _contract(tmp_path, launch={"executor": "torchrun", "nproc_per_node": 2})
    executor = build_executor(ddp, options=ExecutorOptions(on_step=print, stop=stop))
    assert isinstance(executor, TorchrunExecutor) and executor.launch.nproc_per_node == 2
    assert executor.on_step is print
    stop.set()
    assert executor._stop.is_set()  # an interrupt of the bot still reaches the trial


def test_fingerprints_keep_moe_and_world_size_apart(tmp_path: Path) -> None:
    from bot.stages.run.search import fingerprints
    from infrarsi.doctor import DoctorReport

    doctor = DoctorReport.__new__(DoctorReport)
    object.__setattr__(doctor, "model_flops_per_step", None)
    object.__setattr__(doctor, "fingerprint", {"cpu": "x", "world_size": 1})
    moe = _contract(tmp_path, workload={**BASE["workload"], "family": "moe", "experts": 8, "top_k": 2})
    _, workload = fingerprints(moe, doctor)
    assert (workload["family"], workload["experts"], workload["top_k"], workload["world_size"]) == ("moe", 8, 2, 1)
    ddp = _contract(tmp_path, launch={"executor": "torchrun", "nproc_per_node": 2, "nnodes": 2,
                                      "rdzv_endpoint": "h:29400"})
    hardware, workload = fingerprints(ddp, doctor)
    assert (workload["family"], workload["world_size"], workload["experts"]) == ("dense", 4, None)


SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
job.py FAILED
------------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 13374)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_15:15:05
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 13375)
============================================================
"""


def test_the_agents_root_cause_names_the_failed_rank_and_its_status() -> None:
    m = _ROOT_CAUSE.search(SUMMARY)
    assert m and (m.group(1), m.group(2)) == ("1", "3")
