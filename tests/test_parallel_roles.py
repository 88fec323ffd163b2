"""Parallel roles read from knob names and how they are passed; the global batch a contract fixes."""

from __future__ import annotations

from infrarsi.contract.model import Constraint, Knob
from infrarsi.parallel.roles import find_roles, fixed_global_batch, spellings, spellings_of


def _int(name: str, **how: str) -> Knob:
    return Knob(name=name, kind="int", default=1, values=(1, 2, 4), **how)


def test_spellings_are_the_name_and_the_leaf_of_how_it_is_passed() -> None:
    assert spellings_of("model_pp", "model.pipeline_model_parallel_size") == ("model_pp",
                                                                              "pipeline_model_parallel_size")
    assert spellings_of("tp", "--Tensor-Model-Parallel-Size") == ("tp", "tensor_model_parallel_size")
    assert spellings_of("x", "") == ("x",)
    assert spellings(_int("mbs", flag="--micro-batch-size")) == ("mbs", "micro_batch_size")


def test_find_roles_takes_the_first_knob_that_plays_each_role() -> None:
    knobs = [_int("model_vpp", override="model.virtual_pipeline_model_parallel_size"),
             _int("mbs", flag="--micro-batch-size"), _int("micro_batch_size", flag="--mb2"),
             _int("accum", flag="--gradient-accumulation-steps"), _int("cp")]
    roles = find_roles(knobs)
    assert roles["vpp"] == "model_vpp" and roles["micro_batch"] == "mbs"
    assert roles["accumulation"] == "accum" and roles["cp"] == "cp"
    assert {"cp", "vpp", "micro_batch", "accumulation"} <= set(roles)
    assert find_roles([_int("lr_warmup")])["micro_batch"] is None


def test_fixed_global_batch_from_a_divides_constraint_else_the_command() -> None:
    mbs = _int("mbs", flag="--micro-batch-size")
    divides = Constraint(kind="divides", knob="mbs", value=64)
    assert fixed_global_batch([mbs], [divides], ["--global-batch-size", "256"]) == 64
    assert fixed_global_batch([mbs], [], ["train.py", "--global-batch-size", "256"]) == 256
    assert fixed_global_batch([mbs], [], ["--global_batch_size=128"]) == 128
    assert fixed_global_batch([mbs], [], ["model.global_batch_size=32"]) == 32
    assert fixed_global_batch([mbs], [], ["--gbs", "0"]) is None
    assert fixed_global_batch([mbs], [], ["--steps", "10"]) is None
    assert fixed_global_batch([_int("lr")], [divides], ["--global-batch-size", "256"]) is None  # no micro-batch
