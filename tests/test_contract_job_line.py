"""A candidate as a command: every knob passed the way it says, in contract order, quoted for a shell."""

from __future__ import annotations

from pathlib import Path

from infrarsi.contract.job_line import JobLine, contract_job_line, job_line, knob_arguments
from infrarsi.contract.model import Knob
from tests.support.contracts import write_contract

LR = Knob(name="lr", kind="float", default=0.1, low=0.01, high=1.0, flag="--lr")


def test_each_way_a_knob_reaches_the_job() -> None:
    assert knob_arguments(LR, 0.5) == (("--lr", "0.5"), ())
    eq = Knob(name="mbs", kind="int", default=1, values=(1, 2), flag="--mbs", form="equals")
    assert knob_arguments(eq, 2) == (("--mbs=2",), ())
    env = Knob(name="threads", kind="int", default=1, values=(1, 4), env="OMP_NUM_THREADS")
    assert knob_arguments(env, 4) == ((), (("OMP_NUM_THREADS", "4"),))
    hydra = Knob(name="pp", kind="int", default=1, values=(1, 2), override="model.pp")
    assert knob_arguments(hydra, 2) == (("model.pp=2",), ())
    switch = Knob(name="compile", kind="bool", default=False, flag="--compile", switch=True)
    assert knob_arguments(switch, True) == (("--compile",), ()) and knob_arguments(switch, False) == ((), ())
    both = Knob(name="fused", kind="bool", default=True, flag="--fused", switch=True, off_flag="--no-fused")
    assert knob_arguments(both, False) == (("--no-fused",), ())


def test_job_line_passes_every_knob_defaults_too_after_the_fixed_arguments() -> None:
    threads = Knob(name="threads", kind="int", default=1, values=(1, 4), env="OMP_NUM_THREADS")
    line = job_line(["python", "train.py"], ["--steps", "10"], [LR, threads], {"threads": 4},
                    interpreter="/venv/bin/python", fixed_env=(("A", "b c"),))
    assert line == JobLine(argv=("/venv/bin/python", "train.py", "--steps", "10", "--lr", "0.1"),
                           env=(("A", "b c"), ("OMP_NUM_THREADS", "4")))
    assert line.shell() == "A='b c' OMP_NUM_THREADS=4 /venv/bin/python train.py --steps 10 --lr 0.1"
    assert job_line(["python", "t.py"], [], [], {}).argv == ("python", "t.py")  # no interpreter: as written
    assert job_line(["bash", "run.sh"], [], [], {}, interpreter="/py").argv == ("bash", "run.sh")


def test_contract_job_line_is_the_workloads(tmp_path: Path) -> None:
    contract = write_contract(tmp_path)
    line = contract_job_line(contract, {"micro": 2})
    assert line.argv == ("python", "train.py", "--dtype", "fp32", "--micro", "2")
    assert line.env == ()
