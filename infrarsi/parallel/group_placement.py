"""Whether the tensor- and expert-parallel groups of a candidate span nodes: design columns on communication.

A multi-node job keeps its tensor-parallel ranks and the experts' all-to-all
on NVLink only while the group fits in a node; past that, part of every
collective crosses the network (Megatron-LM's guidance: tensor parallelism
within a node, expert parallelism within a node where the experts fit). With
Megatron-LM's rank order (``tp`` ranks adjacent, expert-parallel ranks ``tp``
apart: Megatron-Core's expert rank generator, whose expert tensor-parallel size
defaults to ``tp``) the share of a rank's peers on other nodes follows from the
knobs and the launch's ranks per node (:class:`~infrarsi.search.derived.GroupPlacement`).
A column is built only when the bot launches several nodes and some levels of
the knobs make the group span them; otherwise nothing changes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from infrarsi.parallel.roles import find_roles
from infrarsi.contract.model import Knob
from infrarsi.search.derived import DerivedFeature, GroupPlacement, group_placement

#: Prior on each column's coefficient for the communication part of step time (log units at share 1, sd).
#: An all-to-all whose peers are all off-node runs at one NIC's bandwidth per GPU instead of NVLink's
#: (400 Gb/s = 50 GB/s against 450 GB/s on H100: ~9x); with the all-to-all about half of what a MoE step
#: leaves exposed, the part grows ~5x. Tensor-parallel collectives off-node keep most of their bandwidth
#: (NCCL rings over every NIC of the node) but pay network latency twice per layer: ~2x on the part.
TIME_PRIORS: dict[str, tuple[float, float]] = {"ep": (math.log(5.0), 0.6), "tp": (math.log(2.0), 0.6)}
#: Where a group's ranks sit moves no bytes of memory.
MEMORY_PRIOR: tuple[float, float] = (0.0, 0.02)


def placement_features(knobs: Sequence[Knob], world_size: int | None,
                       ranks_per_node: int | None) -> tuple[DerivedFeature, ...]:
    """``off_node:tp`` and ``off_node:ep`` columns for the groups some levels of ``knobs`` spread over
    several nodes of ``ranks_per_node`` ranks; none on one node or without those knobs."""
    if not world_size or not ranks_per_node or world_size <= ranks_per_node:
        return ()
    roles = find_roles(knobs)
    by_name = {k.name: k for k in knobs}
    groups = []
    if roles["tp"] is not None:
        groups.append(GroupPlacement(group="tp", size=roles["tp"], ranks_per_node=ranks_per_node))
    if roles["ep"] is not None:
        stride = (roles["tp"],) if roles["tp"] is not None else ()
        groups.append(GroupPlacement(group="ep", size=roles["ep"], stride=stride, ranks_per_node=ranks_per_node))
    largest = {name: _largest(knob) for name, knob in by_name.items()}
    return tuple(group_placement(g) for g in groups if g.off_node_share(largest) > 0)


def _largest(knob: Knob) -> float:
    """The largest numeric level of ``knob`` (its default when it lists none)."""
    levels = [v for v in (knob.values or ()) if isinstance(v, int | float) and not isinstance(v, bool)]
    if knob.high is not None:
        levels.append(knob.high)
    default = knob.default if isinstance(knob.default, int | float) and not isinstance(knob.default, bool) else 1
    return float(max(levels, default=default))
