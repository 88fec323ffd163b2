"""Parallel layout settings offered as knobs once the launch says how many ranks there are.

Tensor, pipeline, context and expert parallel degrees and the ZeRO/FSDP sharding
stage change how a job is laid out over its ranks, not what it computes: Megatron-LM
(``--tensor-model-parallel-size``), DeepSpeed (``zero_stage``), NeMo and torchtitan
configs all expose them, and they are where the big wins on many GPUs are. They
are offered only when the command's launcher (:mod:`.launcher`) gives a world size
above one; their levels are the powers of two that divide it (tensor parallelism
within one node, Megatron-LM's guidance), and the run stage drops the layouts the
launcher would refuse (``infrarsi/parallel/launcher_checks.py``) and prices the rest
(pipeline bubble, groups that span nodes, model-state bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.stages.init.classify import current
from bot.stages.init.setting import Setting
from bot.stages.init.knob_entries import EXPRESSIBLE, knob_name, passing_table
from infrarsi.parallel.roles import ROLES, spellings_of
from infrarsi.parallel.sharding_priors import FSDP_STAGES, HYBRID_STAGES, SHARDING_KNOB

#: The degrees offered (vpp is left out: its levels depend on the layers per pipeline stage).
DEGREE_ROLES = ("tp", "pp", "cp", "ep")


@dataclass(kw_only=True)
class ParallelPlan:
    knobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)


def plan_parallel(settings: Sequence[Setting], given: Mapping[str, str], *, world_size: int, ranks_per_node: int,
                  taken: set[str]) -> ParallelPlan:
    """Knob tables for the parallel degrees and sharding stage among ``settings`` (none on one rank)."""
    plan = ParallelPlan()
    for s in settings:
        role = _role(s)
        name = knob_name(s)
        if role is None or name in taken or s.key in taken or name in plan.knobs:
            continue
        if world_size <= 1:
            plan.deferred.append(f"{s.key} (parallel layout; the command runs one process, so nothing to lay out)")
            continue
        if s.passing not in EXPRESSIBLE or s.passing == "switch":
            plan.deferred.append(f"{s.key} (parallel layout; passed as {s.passing})")
            continue
        value = current(s, dict(given))
        domain = _domain(role, value, world_size, ranks_per_node)
        if domain is None:
            plan.deferred.append(f"{s.key} (parallel layout; its current value {value!r} gives no safe domain)")
            continue
        table, why = domain
        plan.knobs[name] = {**passing_table(s), **table}
        plan.notes[f"knobs.{name}"] = (f"guessed: {s.token} ({s.convention}) looks like a knob for the {why}"
                                       + (f" (line {s.line} of the entry script)" if s.line else ""))
    return plan


def _role(s: Setting) -> str | None:
    names = spellings_of(s.leaf, s.token)
    if any(SHARDING_KNOB.match(n) for n in names):
        return "zero"
    return next((r for r in DEGREE_ROLES if any(ROLES[r].match(n) for n in names)), None)


def _powers_of_two(limit: int, world: int) -> list[int]:
    return [v for v in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if v <= limit and world % v == 0]


def _domain(role: str, value: Any, world: int, per_node: int) -> tuple[dict[str, Any], str] | None:
    if role == "zero":
        if type(value) is int and 0 <= value <= 3:
            return ({"kind": "int", "values": [0, 1, 2, 3], "default": value},
                    "ZeRO stage (0-3: what is sharded over the data-parallel ranks)")
        stages = {**FSDP_STAGES, **HYBRID_STAGES}
        if isinstance(value, str) and value in stages:
            values = sorted({value, *FSDP_STAGES})
            return {"kind": "categorical", "values": values, "default": value}, "FSDP sharding strategy"
        return None
    if type(value) is not int or value < 1:
        return None
    limit = per_node if role == "tp" else world
    values = sorted({value, *_powers_of_two(limit, world)})
    where = f"up to the {per_node} ranks of a node" if role == "tp" else f"dividing the world size ({world})"
    label = {"tp": "tensor", "pp": "pipeline", "cp": "context", "ep": "expert"}[role]
    return {"kind": "int", "values": values, "default": value}, f"{label}-parallel degree (powers of two {where})"
