"""How far ZeRO/FSDP already shards the states decides what tp, pp and ep save: the per-part memory priors."""

from __future__ import annotations

import math

import pytest

from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.parallel.sharding_priors import sharding_memory_priors, sharding_of, stage_of, states_bytes
from infrarsi.contract.model import Knob
from infrarsi.search.features import Priors
from infrarsi.search.space import SearchSpace


def _space(zero_default: int = 3, *, moe: bool = False) -> SearchSpace:
    knobs = [Knob(name="tensor_model_parallel_size", kind="int", default=1, values=(1, 2, 4, 8)),
             Knob(name="pp", kind="int", default=1, values=(1, 2, 4)),
             Knob(name="zero_stage", kind="int", default=zero_default, values=(0, 1, 2, 3)),
             Knob(name="micro_batch", kind="int", default=1, values=(1, 2, 4))]
    if moe:
        knobs.append(Knob(name="ep", kind="int", default=1, values=(1, 2, 4, 8)))
    return SearchSpace.from_contract(knobs, [], [])


def test_stages_from_zero_and_fsdp_values() -> None:
    assert [stage_of(v) for v in (0, 1, 2, 3, "3")] == [0, 1, 2, 3, 3]
    assert [stage_of(v) for v in ("NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "ShardingStrategy.FULL_SHARD")] \
        == [0, 2, 3, 3]
    assert stage_of("HYBRID_SHARD") is None and stage_of(True) is None  # a stage and a group: sharding_of


def test_bytes_per_parameter_follow_the_zero_paper() -> None:
    # stage 3 shards everything over the world whatever tp * pp is; stage 0 halves with every doubling
    assert states_bytes(3, 16, mp=1) == states_bytes(3, 16, mp=8) == 1.0
    assert states_bytes(0, 16, mp=2) == 8.0 and states_bytes(1, 16, mp=1) == 4.75
    # experts: ep divides only the experts' share, and under stage 3 nothing
    assert states_bytes(0, 16, ep=8, moe=True) == pytest.approx(16 * (0.2 + 0.8 / 8))
    assert states_bytes(3, 16, ep=8, moe=True) == pytest.approx(1.0)


def test_under_zero_3_tensor_parallelism_moves_activations_not_states() -> None:
    p = sharding_memory_priors(_space(3), world_size=16)
    tp = "tensor_model_parallel_size"
    assert p[f"{tp} [states]"][0] == pytest.approx(0.0)
    assert p[f"{tp} [activations]"][0] < math.log(0.7)
    assert p[f"{tp}*zero_stage=0 [states]"][0] == pytest.approx(math.log(0.5))
    assert math.log(0.5) < p[f"{tp}*zero_stage=1 [states]"][0] < p[f"{tp}*zero_stage=2 [states]"][0] < 0
    assert p["zero_stage=0 [states]"][0] == pytest.approx(math.log(16))  # 16 bytes against 16 / world
    assert "pp*zero_stage=2 [states]" in p and not any(k.startswith("micro_batch") for k in p)
    # relative to a plain data-parallel baseline it is the other way round
    q = sharding_memory_priors(_space(0), world_size=16)
    assert q[f"{tp} [states]"][0] == pytest.approx(math.log(0.5))
    assert q[f"{tp}*zero_stage=3 [states]"][0] == pytest.approx(-math.log(0.5))
    assert q["zero_stage=3 [states]"][0] == pytest.approx(-math.log(16))


def test_nothing_is_said_without_a_sharding_knob_or_a_world_size() -> None:
    assert sharding_memory_priors(_space(3), world_size=None) == {}
    assert sharding_memory_priors(_space(3), world_size=1) == {}
    plain = SearchSpace.from_contract([Knob(name="tp", kind="int", default=1, values=(1, 2))], [], [])
    assert sharding_memory_priors(plain, world_size=8) == {}
    assert builtin_priors(_space(3)).memory_by_part == {}
    priors = builtin_priors(_space(3, moe=True), world_size=32)
    assert priors.unknown_names(_space(3, moe=True)) == []
    assert priors.memory_by_part["ep [states]"][0] == pytest.approx(0.0)
    assert priors.memory_by_part["ep*zero_stage=0 [states]"][0] < math.log(0.7)


def test_a_per_part_key_must_name_columns_of_the_space_and_a_part() -> None:
    space = _space(3)
    ok = Priors(memory_by_part={"pp [states]": (0.0, 0.1), "zero_stage=1*pp [states]": (0.0, 0.1),
                                "micro_batch^2 [activations]": (0.0, 0.1)})
    assert ok.unknown_names(space) == []
    bad = Priors(memory_by_part={"pq [states]": (0.0, 0.1), "pp": (0.0, 0.1), "pp*zero=1 [states]": (0.0, 0.1),
                                 "pp [compute]": (0.0, 0.1)})
    assert bad.unknown_names(space) == ["pp", "pp [compute]", "pp*zero=1 [states]", "pq [states]"]


def test_hybrid_sharding_shards_within_a_node_and_replicates_across_nodes() -> None:
    assert sharding_of("HYBRID_SHARD", 32, 8) == (3, 8) and sharding_of("_HYBRID_SHARD_ZERO2", 32, 8) == (2, 8)
    assert sharding_of("HYBRID_SHARD", 8, 8) == (3, 8) and sharding_of("HYBRID_SHARD", 32, None) == (3, 32)
    assert sharding_of("FULL_SHARD", 32, 8) == (3, 32) and sharding_of("bogus", 32, 8) is None
    knobs = [Knob(name="sharding_strategy", kind="categorical", default="FULL_SHARD",
                  values=("FULL_SHARD", "HYBRID_SHARD", "SHARD_GRAD_OP", "NO_SHARD")),
             Knob(name="micro_batch", kind="int", default=1, values=(1, 2, 4))]
    space = SearchSpace.from_contract(knobs, [], [])
    # four nodes of eight: hybrid keeps 16/8 bytes per parameter where full sharding keeps 16/32
    p = sharding_memory_priors(space, world_size=32, ranks_per_node=8)
    assert p["sharding_strategy=HYBRID_SHARD [states]"][0] == pytest.approx(math.log(4.0))
    assert p["sharding_strategy=NO_SHARD [states]"][0] == pytest.approx(math.log(32.0))
    # on one node hybrid is full sharding; without a node size it is taken as one node
    assert sharding_memory_priors(space, world_size=8, ranks_per_node=8)[
        "sharding_strategy=HYBRID_SHARD [states]"][0] == pytest.approx(0.0)
    assert builtin_priors(space, 32, 8).memory_by_part == p
