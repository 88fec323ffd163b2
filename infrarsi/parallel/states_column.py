"""Model-state bytes per parameter as a design column on the states part of peak memory.

:mod:`.sharding_priors` prices each ZeRO/FSDP stage and each doubling of tp, pp
and ep on the states part as main effects and pairs: the mean slope of the
bytes formula from 1 to 8, the stage's ratio at ``mp = 1``. Those are exact at
the ends of a slope and off in between, and what a log-linear model then says
about a layout far from the trials (``tp = 4, ep = 2`` at ZeRO-1 from trials at
ZeRO-2 and tp = 8) carries the approximation: on the cluster simulator the
states of mixtral-8x7b's optimum on two H100 nodes came out 14% high, enough to
keep the search off it. The formula itself is cheap: per parameter a GPU holds

    ``(1 - e) x dense(stage, mp) + e x expert(stage, mp, ep)``

bytes, ``mp = tp x pp``, ``e`` the experts' share (:func:`~.sharding_priors.states_bytes`).
Its logarithm for a candidate's knobs is the column ``model_states``, with
coefficient 1 on the states part a priori (the intercept holds the parameter
count); the stage's and the degrees' own states priors become residuals near
zero. Built under the conditions the sharding priors need: a sharding knob
whose levels name stages, and the world size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from infrarsi.parallel.roles import find_roles
from infrarsi.parallel.sharding_priors import SHARDING_KNOB, sharding_of, states_bytes
from infrarsi.contract.model import Knob, KnobValue
from infrarsi.search.derived import DerivedFeature, knob_number

#: The column's name.
MODEL_STATES = "model_states"
#: Prior on its coefficient for the states part (log units per log byte): 1 is the formula; the sd covers an
#: optimizer other than mixed-precision Adam, fp32 gradients, embeddings a pipeline stage keeps twice.
STATES_PRIOR: tuple[float, float] = (1.0, 0.1)
#: Its total-peak prior, for the single-part model: states are about half of the baseline's peak.
TOTAL_PRIOR: tuple[float, float] = (0.5, 0.25)
#: What a stage and a degree do to the states besides the formula's bytes (ZeRO-3's gathered layers,
#: communication buckets): sd of their residual priors, mean 0.
STAGE_RESIDUAL_SD, DEGREE_RESIDUAL_SD = 0.1, 0.05


def states_feature(knobs: Sequence[Knob], world_size: int | None,
                   ranks_per_node: int | None = None) -> DerivedFeature | None:
    """The ``model_states`` column for ``knobs`` on ``world_size`` ranks, None without a sharding knob whose
    baseline names a stage, or with fewer than two ranks."""
    sharding = next((k for k in knobs if SHARDING_KNOB.match(k.name)), None)
    if sharding is None or not world_size or world_size < 2:
        return None
    base = sharding_of(sharding.default, world_size, ranks_per_node)
    if base is None:
        return None
    roles = find_roles(knobs)
    moe = roles["ep"] is not None

    def value(values: Mapping[str, KnobValue]) -> float:
        stage, ranks = sharding_of(values.get(sharding.name, sharding.default), world_size, ranks_per_node) or base
        tp, pp, ep = (max(knob_number(values, roles[r], 1), 1.0) for r in ("tp", "pp", "ep"))
        return math.log(states_bytes(stage, ranks, mp=tp * pp, ep=ep, moe=moe))

    reads = tuple(k for k in (sharding.name, roles["tp"], roles["pp"], roles["ep"]) if k)
    return DerivedFeature(name=MODEL_STATES, knobs=reads, value=value)


def residual_priors(by_part: Mapping[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """The sharding priors with the column in the space: its own prior on states, and every stage's and
    degree's states prior a residual around zero (their activations priors unchanged)."""
    out = {}
    for key, prior in by_part.items():
        if not key.endswith(" [states]"):
            out[key] = prior
            continue
        name = key.removesuffix(" [states]")
        out[key] = (0.0, STAGE_RESIDUAL_SD if SHARDING_KNOB.match(name.split("=")[0]) else DEGREE_RESIDUAL_SD)
    out[f"{MODEL_STATES} [states]"] = STATES_PRIOR
    return out

