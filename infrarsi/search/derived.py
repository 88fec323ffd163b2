"""Design columns computed from several knobs at once: what no knob's own encoding can say.

Every model of the engine is log-linear (or a sum of log-linear parts) in the
knobs' encodings. Some effects are not: the pipeline bubble of 1F1B
scheduling (Narayanan et al. 2021, § 2.2) stretches a step by
``1 + (pp - 1) / (vpp * m)``, where the micro-batches per step
``m = global_batch / (dp * micro_batch)`` and ``dp = world / (tp * pp * cp)``:
small where micro-batches are many, most of the step where they are few, and
no sum of per-knob slopes and pairwise products follows it across tp, pp, vpp
and the micro-batch. Its logarithm, computed from the candidate's knob values,
is one more column whose coefficient is known a priori (1 on the compute part:
the step is ``m + (pp - 1)/vpp`` micro-batch slots instead of ``m``).

The other derived columns say where a communication group's ranks sit. With
Megatron-LM's rank order (tensor-parallel ranks adjacent, then expert-parallel
ones ``tp`` apart), a group of ``p`` ranks ``s`` apart stays on one node while
``s x p`` is at most the ranks per node; beyond, a share
``(p - g) / (p - 1)`` of each rank's peers (``g`` of the group per node) is
reached over the network instead of NVLink, several times slower for an
all-to-all. Which of ``tp = 4, ep = 2`` and ``tp = 8, ep = 2`` keeps the
experts' all-to-all inside a node depends on both knobs and the node's size:
no per-knob slope says it.

A derived column is relative to the baseline like every other feature (the
baseline encodes to zero), takes part in no square or pair, and is priced by
the priors under its own name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from infrarsi.contract.model import KnobValue

#: The pipeline bubble column's name (a feature name of a space that has one).
PIPELINE_BUBBLE = "pipeline_bubble"


@dataclass(frozen=True, kw_only=True, slots=True)
class DerivedFeature:
    """A design column: ``value`` of a candidate's knob values (every knob of the space present)."""

    name: str
    knobs: tuple[str, ...]  # the knobs it reads
    value: Callable[[Mapping[str, KnobValue]], float]


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineRoles:
    """Which knobs of a space set the pipeline's shape, and what the contract fixes.

    ``pp`` is required; any other degree missing from the space stays at 1
    (``vpp``, ``tp``, ``cp``, the micro-batch). The
    micro-batches per step come from ``accumulation`` (a gradient-accumulation
    knob is exactly that count) or from ``global_batch`` (sequences per
    optimizer step across data-parallel replicas, Megatron's
    ``--global-batch-size``) with the world size.
    """

    pp: str
    world_size: int
    global_batch: int | None = None
    tp: str | None = None
    cp: str | None = None
    vpp: str | None = None
    micro_batch: str | None = None
    accumulation: str | None = None

    @property
    def knobs(self) -> tuple[str, ...]:
        return tuple(k for k in (self.pp, self.tp, self.cp, self.vpp, self.micro_batch, self.accumulation) if k)

    def microbatches(self, values: Mapping[str, KnobValue]) -> float | None:
        """Micro-batches per optimizer step on one pipeline, None where the contract does not say."""
        if self.accumulation is not None:
            return max(knob_number(values, self.accumulation, 1), 1.0)
        if self.global_batch is None:
            return None
        model_parallel = knob_number(values, self.tp, 1) * knob_number(values, self.pp, 1) * knob_number(values, self.cp, 1)
        dp = max(self.world_size // max(int(model_parallel), 1), 1)
        micro = knob_number(values, self.micro_batch, 1)
        return max(self.global_batch // max(int(dp * micro), 1), 1)

    def log_slots(self, values: Mapping[str, KnobValue]) -> float:
        """``log(1 + (pp - 1) / (vpp * m))``: the bubble's stretch of a step, 0 without pipelining."""
        pp = knob_number(values, self.pp, 1)
        m = self.microbatches(values)
        if pp <= 1 or m is None:
            return 0.0
        return math.log1p((pp - 1) / (knob_number(values, self.vpp, 1) * m))


def pipeline_bubble(roles: PipelineRoles) -> DerivedFeature | None:
    """The bubble column for a space with these roles, None when the micro-batch count is unknown."""
    if roles.accumulation is None and roles.global_batch is None:
        return None
    return DerivedFeature(name=PIPELINE_BUBBLE, knobs=roles.knobs, value=roles.log_slots)


#: Prefix of a group-placement column's name: ``off_node:ep`` for the expert-parallel group.
OFF_NODE = "off_node:"


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupPlacement:
    """A communication group whose size is a knob and whose ranks are ``stride`` (a product of knobs) apart.

    ``off_node_share`` is the share of a rank's peers in the group that are on other nodes, with
    ``ranks_per_node`` ranks on each: 0 while the group fits in a node."""

    group: str  # the role: "tp", "ep"
    size: str  # the knob that sets the group's size
    stride: tuple[str, ...] = ()  # knobs whose product is the distance between the group's ranks
    ranks_per_node: int

    @property
    def knobs(self) -> tuple[str, ...]:
        return (self.size, *self.stride)

    def off_node_share(self, values: Mapping[str, KnobValue]) -> float:
        size = knob_number(values, self.size, 1)
        stride = math.prod(knob_number(values, k, 1) for k in self.stride)
        if size <= 1 or stride * size <= self.ranks_per_node:
            return 0.0
        per_node = min(max(self.ranks_per_node // stride, 1.0), size)
        return (size - per_node) / (size - 1)


def group_placement(placement: GroupPlacement) -> DerivedFeature:
    """The column ``off_node:<group>``: the group's off-node share of peers for a candidate."""
    return DerivedFeature(name=f"{OFF_NODE}{placement.group}", knobs=placement.knobs,
                          value=placement.off_node_share)


def knob_number(values: Mapping[str, KnobValue], knob: str | None, default: float) -> float:
    """The numeric value of ``knob`` among a candidate's ``values``; ``default`` without the knob, for a bool
    or for a level that is not a number (a categorical ``"auto"``)."""
    value = values.get(knob, default) if knob is not None else default
    if isinstance(value, bool):
        return float(default)
    try:
        return float(value)
    except (TypeError, ValueError):
        return float(default)
