"""Whether the micro-batch is part of a Mixture-of-Experts task, read from the job's settings by ``init``.

An MoE router whose experts have a capacity (a capacity factor: Switch, GShard and
the public code written after them) takes at most ``capacity_factor x tokens x
top_k / experts`` assignments per expert and drops the rest — and the tokens it
counts are those of one forward, a micro-batch. Another split of the same global
batch then drops other tokens: the micro-batch is part of the task, and offering
it as a knob would only cost trials that verification must call another job. A
router without capacity (a factor of 0, or none at all) drops nothing, and a
re-split routes the same tokens: the micro-batch stays a knob. Either way the
contract's workload is marked ``family = "moe"`` with its experts and top-k.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_EXPERTS = re.compile(r"^(n_exp|n_experts|num_experts|moe_num_experts|num_local_experts|experts|n_routed_experts|"
                      r"num_moe_experts)$")
_TOP_K = re.compile(r"^(top_k|moe_top_k|num_experts_per_tok|moe_router_topk|k)$")
_CAPACITY = re.compile(r"^(capacity_factor|train_capacity|moe_capacity_factor|capacity_factor_train|"
                       r"expert_capacity_factor|moe_expert_capacity_factor)$")
#: Knob names that choose how the global batch is split (micro-batch and gradient accumulation).
_SPLIT = re.compile(r"(micro_?batch|per_device_train_batch_size|mbs|micro_bs|grad(ient)?_accum\w*|"
                    r"accumulate_grad_batches|^batch_size$|device_batch_size)")


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeTask:
    experts: int
    top_k: int | None
    capacity: tuple[str, float] | None  # the setting and its value, where a capacity drops tokens

    @property
    def micro_batch_in_task(self) -> bool:
        return self.capacity is not None


def read_moe(values: Mapping[str, Any]) -> MoeTask | None:
    """The MoE task the settings describe (``values``: setting name → the job's value), or None."""
    def first(pattern: re.Pattern[str], kind: type) -> tuple[str, Any] | None:
        return next(((k, v) for k, v in values.items() if pattern.match(k.lower().replace("-", "_"))
                     and isinstance(v, kind) and not isinstance(v, bool)), None)

    experts = first(_EXPERTS, int)
    if experts is None or experts[1] < 2:
        return None
    top_k = first(_TOP_K, int)
    capacity = first(_CAPACITY, (int, float))  # type: ignore[arg-type]
    return MoeTask(experts=experts[1], top_k=top_k[1] if top_k else None,
                   capacity=(capacity[0], float(capacity[1])) if capacity and capacity[1] > 0 else None)


def split_knob_names(knobs: Mapping[str, Mapping[str, Any]], constraints: list[dict[str, Any]]) -> list[str]:
    """The drafted knobs that split the global batch: a coupled pair's, and those named as a micro-batch or an
    accumulation count."""
    names = {n for c in constraints if c.get("kind") == "product" for n in c.get("knobs", ())}
    names |= {n for n in knobs if _SPLIT.search(n)}
    return sorted(n for n in names if n in knobs)


def moe_note(task: MoeTask, split: list[str]) -> str:
    """What ``init`` says about the micro-batch of this MoE task."""
    where = f"{task.experts} experts" + (f", top-{task.top_k}" if task.top_k else "")
    if task.capacity is not None:
        name, value = task.capacity
        return (f"the micro-batch is part of this MoE task ({where}): {name} = {value:g} caps each expert's "
                "assignments per forward, and a forward is one micro-batch, so another split of the global batch "
                "drops other tokens; " + (f"{', '.join(split)} {'stays' if len(split) == 1 else 'stay'} fixed in "
                                          "workload.args, not offered as a knob" if split
                                          else "no micro-batch setting was offered as a knob"))
    return (f"the micro-batch is not part of this MoE task ({where}): no expert capacity drops tokens, so a "
            "re-split routes the same tokens" + (f"; {', '.join(split)} offered as knobs" if split else ""))
