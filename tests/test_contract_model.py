"""The contract's data model: knob domains, constraints, launch sizes, the baseline's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.contract.model import Constraint, Knob, Launch, SlurmLaunch, Timing
from tests.support.contracts import write_contract


def test_knob_domains() -> None:
    flag = Knob(name="compile", kind="bool", default=False, flag="--c")
    assert flag.contains(True) and not flag.contains(1) and flag.domain_text() == "true or false"
    micro = Knob(name="micro", kind="int", default=1, values=(1, 2, 4), flag="--m")
    assert micro.contains(2) and not micro.contains(3) and not micro.contains(True)  # True == 1, yet not a level
    assert micro.domain_text() == "one of 1, 2, 4"
    lr = Knob(name="lr", kind="float", default=0.1, low=0.001, high=1.0, flag="--lr")
    assert lr.contains(0.5) and lr.contains(1) and not lr.contains(2.0) and not lr.contains(True)
    assert not lr.contains("0.5")
    assert lr.domain_text() == "a number in [0.001, 1]"
    steps = Knob(name="steps", kind="int", default=10, low=1, high=100, flag="--s")
    assert steps.contains(50) and not steps.contains(50.0)
    assert steps.domain_text() == "an integer in [1, 100]"
    assert micro.codec.from_cli("4") == 4


def test_constraints_allow_and_describe() -> None:
    divides = Constraint(kind="divides", knob="micro", value=8)
    assert divides.allows({"micro": 4}) and not divides.allows({"micro": 3}) and divides.allows({})
    assert not divides.allows({"micro": 0})
    assert divides.describe() == "micro must divide 8"
    forbid = Constraint(kind="forbid", when=(("dtype", "fp16"), ("compile", True)), reason="r")
    assert not forbid.allows({"dtype": "fp16", "compile": True}) and forbid.allows({"dtype": "fp16", "compile": False})
    assert forbid.describe() == "forbidden: dtype='fp16', compile=True"
    product = Constraint(kind="product", knobs=("micro", "accum"), value=16)
    assert product.allows({"micro": 4, "accum": 4}) and not product.allows({"micro": 4, "accum": 2})
    assert product.allows({"micro": 4})  # a knob absent: nothing to check
    assert product.describe() == "micro x accum must equal 16"


def test_launch_sizes() -> None:
    assert Launch().world_size == 1 and Launch().ranks_per_node == 1
    torchrun = Launch(executor="torchrun", nproc_per_node=4, nnodes=2)
    assert (torchrun.world_size, torchrun.ranks_per_node) == (8, 4)
    assert Launch(executor="local", nproc_per_node=4).world_size == 1
    slurm = Launch(executor="slurm", slurm=SlurmLaunch(nodes=2, tasks_per_node=8, gpus_per_node=8))
    assert (slurm.world_size, slurm.ranks_per_node, slurm.slurm.devices) == (16, 8, 16)
    assert SlurmLaunch(nodes=2, tasks_per_node=3, gpus_per_node=0).devices == 6  # CPU-only: its ranks
    assert Timing(warmup_steps=3, measured_steps=5).total_steps == 8


def test_contract_knob_lookup_and_defaults(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    assert contract.knob("micro").default == 1
    assert contract.defaults() == {"dtype": "fp32", "micro": 1}
    with pytest.raises(KeyError):
        contract.knob("absent")
