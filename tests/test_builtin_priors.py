"""The built-in knob priors: which names they know, and that they point where the literature says."""

from __future__ import annotations

import math

from infrarsi.search.builtin_priors import builtin_priors
from infrarsi.contract.model import Knob
from infrarsi.search.space import SearchSpace


def _space() -> SearchSpace:
    knobs = [Knob(name="tp", kind="int", default=1, values=(1, 2, 4, 8)),
             Knob(name="pipeline_model_parallel_size", kind="int", default=1, values=(1, 2, 4)),
             Knob(name="zero_stage", kind="int", default=3, values=(0, 1, 2, 3)),
             Knob(name="recompute", kind="categorical", default="full", values=("none", "selective", "full")),
             Knob(name="overlap_grad_reduce", kind="bool", default=False),
             Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16")),
             Knob(name="threads", kind="int", default=1, values=(1, 2))]
    return SearchSpace.from_contract(knobs, [], [])


def test_distributed_knobs_get_priors_by_name_and_unknown_ones_do_not() -> None:
    priors = builtin_priors(_space())
    for name in ("tp", "pipeline_model_parallel_size", "zero_stage=0", "zero_stage=1", "zero_stage=2",
                 "recompute=none", "recompute=selective", "overlap_grad_reduce=True", "dtype=bf16"):
        assert name in priors.time and name in priors.memory, name
    assert not any(n.startswith("threads") for n in priors.time)


def test_the_priors_point_the_way_the_sources_say() -> None:
    p = builtin_priors(_space())
    t = {k: math.exp(m) for k, (m, _) in p.time.items()}
    mem = {k: math.exp(m) for k, (m, _) in p.memory.items()}
    # sharding saves memory and costs a little time; recomputation the other way round
    assert mem["tp"] < 1 and t["tp"] >= 1 and mem["pipeline_model_parallel_size"] < 1
    assert mem["zero_stage=0"] > mem["zero_stage=1"] > mem["zero_stage=2"] > 1
    assert t["recompute=none"] < t["recompute=selective"] < 1 < mem["recompute=selective"] < mem["recompute=none"]
    assert t["overlap_grad_reduce=True"] < 1


def test_a_proposers_table_overrides_effects_and_keeps_the_parts() -> None:
    """`infrarsi run` lays the proposer's table over the built-in priors; the parts each feature acts on and
    the per-part priors must survive it, or the two-part time and memory models are silently switched off."""
    from infrarsi.patches import Effect
    from infrarsi.seams.proposer import PriorTable

    base = builtin_priors(_space(), world_size=16)
    assert base.memory_parts and base.time_parts and base.memory_by_part
    table = PriorTable(effects={"tp": Effect(time_ratio=1.1, time_sigma=0.2, mem_ratio=0.5, mem_sigma=0.3,
                                                    source="test")})
    merged = table.to_priors(base)
    assert merged.memory["tp"] == (math.log(0.5), 0.3) and merged.time["tp"] == (math.log(1.1), 0.2)
    assert merged.memory_parts == base.memory_parts and merged.time_parts == base.time_parts
    assert merged.memory_by_part == base.memory_by_part
