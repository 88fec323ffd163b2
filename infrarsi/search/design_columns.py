"""Every derived design column a contract's knobs and launch call for, in one place for the run stage and the
benchmarks: the pipeline bubble (:mod:`.pipeline_bubble`), groups that span nodes (:mod:`.group_placement`)
and model-state bytes (:mod:`.states_column`). Each is absent when the contract does not say enough."""

from __future__ import annotations

from collections.abc import Sequence

from infrarsi.parallel.group_placement import placement_features
from infrarsi.parallel.pipeline_bubble import bubble_features
from infrarsi.parallel.states_column import states_feature
from infrarsi.contract.model import Constraint, Knob
from infrarsi.search.derived import DerivedFeature


def derived_features(knobs: Sequence[Knob], constraints: Sequence[Constraint], world_size: int | None,
                     ranks_per_node: int | None, argv: Sequence[str] = ()) -> tuple[DerivedFeature, ...]:
    """The derived columns for a job of ``world_size`` ranks, ``ranks_per_node`` per node; ``argv`` is the
    workload's command and arguments (where a fixed global batch may be given)."""
    states = states_feature(knobs, world_size, ranks_per_node)
    return (*bubble_features(knobs, constraints, world_size, argv),
            *placement_features(knobs, world_size, ranks_per_node),
            *((states,) if states else ()))
