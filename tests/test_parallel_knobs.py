"""bot.stages.init.parallel_knobs: parallel degrees and the sharding stage offered as knobs once there are ranks."""
from __future__ import annotations

from typing import Any

from bot.stages.init.parallel_knobs import plan_parallel
from bot.stages.init.setting import Setting


def _arg(key: str, default: Any, passing: str = "flag-space") -> Setting:
    return Setting(key=key, convention="argparse", passing=passing,  # type: ignore[arg-type]
                   token="--" + key.replace("_", "-"), default=default, has_default=True, line=7)


MEGATRON = [_arg("tensor_model_parallel_size", 1), _arg("pipeline_model_parallel_size", 2), _arg("zero_stage", 1),
            _arg("lr", 0.1)]


def test_degrees_are_powers_of_two_dividing_the_world_and_tp_stays_in_a_node() -> None:
    plan = plan_parallel(MEGATRON, {}, world_size=16, ranks_per_node=8, taken=set())
    assert plan.knobs == {
        "tensor_model_parallel_size": {"flag": "--tensor-model-parallel-size", "kind": "int", "values": [1, 2, 4, 8],
                                       "default": 1},
        "pipeline_model_parallel_size": {"flag": "--pipeline-model-parallel-size", "kind": "int",
                                         "values": [1, 2, 4, 8, 16], "default": 2},
        "zero_stage": {"flag": "--zero-stage", "kind": "int", "values": [0, 1, 2, 3], "default": 1}}
    assert plan.notes["knobs.tensor_model_parallel_size"] == (
        "guessed: --tensor-model-parallel-size (argparse) looks like a knob for the tensor-parallel degree "
        "(powers of two up to the 8 ranks of a node) (line 7 of the entry script)")
    assert plan.deferred == []


def test_the_commands_value_is_kept_among_the_levels() -> None:
    plan = plan_parallel(MEGATRON[:1], {"--tensor-model-parallel-size": "3"}, world_size=4, ranks_per_node=4,
                         taken=set())
    assert plan.knobs["tensor_model_parallel_size"]["values"] == [1, 2, 3, 4]
    assert plan.knobs["tensor_model_parallel_size"]["default"] == 3


def test_one_rank_offers_nothing_and_says_why() -> None:
    plan = plan_parallel(MEGATRON, {}, world_size=1, ranks_per_node=1, taken=set())
    assert plan.knobs == {}
    assert plan.deferred[0] == ("tensor_model_parallel_size (parallel layout; the command runs one process, "
                                "so nothing to lay out)")
    assert len(plan.deferred) == 3  # lr is no layout setting


def test_what_cannot_be_passed_or_has_no_safe_domain_is_deferred() -> None:
    settings = [_arg("tp", 2, passing="code"), _arg("context_parallel_size", 0), _arg("zero_stage", 7)]
    plan = plan_parallel(settings, {}, world_size=4, ranks_per_node=4, taken=set())
    assert plan.knobs == {}
    assert plan.deferred == ["tp (parallel layout; passed as code)",
                             "context_parallel_size (parallel layout; its current value 0 gives no safe domain)",
                             "zero_stage (parallel layout; its current value 7 gives no safe domain)"]


def test_a_setting_already_taken_is_left_alone() -> None:
    plan = plan_parallel(MEGATRON, {}, world_size=8, ranks_per_node=8, taken={"zero_stage"})
    assert "zero_stage" not in plan.knobs and len(plan.knobs) == 2


def test_an_fsdp_sharding_strategy_is_categorical() -> None:
    plan = plan_parallel([_arg("sharding_strategy", "FULL_SHARD")], {}, world_size=8, ranks_per_node=8, taken=set())
    table = plan.knobs["sharding_strategy"]
    assert table == {"flag": "--sharding-strategy", "kind": "categorical",
                     "values": ["FULL_SHARD", "NO_SHARD", "SHARD_GRAD_OP"], "default": "FULL_SHARD"}
