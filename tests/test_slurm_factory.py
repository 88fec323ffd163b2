"""The registry's ``"slurm"`` entry: the executor a contract's ``[launch.slurm]`` asks for, and its workdir."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bot.executors.slurm.factory import slurm_executor, workdir_of
from infrarsi.contract.load import parse_contract
from tests.support.tinygpt import REPO

DDP = REPO / "fixtures" / "ddp"


def _contract(slurm: dict):  # noqa: ANN202
    data = tomllib.loads((DDP / "infrarsi.toml").read_text())
    data["launch"] = {"executor": "slurm", "slurm": slurm}
    return parse_contract(data, source=Path("infrarsi.toml"), root=DDP)


def test_the_workdir_is_the_repos_state_dir_unless_the_contract_names_one() -> None:
    assert workdir_of(_contract({})) == DDP / ".infrarsi" / "slurm"
    assert workdir_of(_contract({"workdir": "/shared/jobs"})) == Path("/shared/jobs")
    assert workdir_of(_contract({"workdir": "scratch/jobs"})) == DDP / "scratch" / "jobs"


def test_the_executor_carries_the_contracts_settings() -> None:
    contract = _contract({"nodes": 2, "partition": "gpu", "workdir": "/shared/jobs"})
    ex = slurm_executor(contract, environ={"PATH": "/bin"})
    assert ex.name == "slurm" and ex.workdir == Path("/shared/jobs")
    assert ex.settings == contract.launch.slurm and ex.settings.partition == "gpu"
