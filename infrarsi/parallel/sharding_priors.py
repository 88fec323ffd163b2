"""What model parallelism does to model states depends on how far ZeRO/FSDP already shards them.

ZeRO (Rajbhandari et al. 2020) shards over the data-parallel group, and that
group is what is left of the world after tensor and pipeline parallelism:
``dp = world / (tp * pp)`` (experts shard over ``dp / ep``). Per parameter a
GPU holds

    stage 0: 16 / mp        stage 1: 4 / mp + 12 / world
    stage 2: 2 / mp + 14 / world        stage 3: 16 / world

bytes of states, ``mp = tp * pp``. So doubling tp or pp halves the states of
plain data parallelism and leaves ZeRO-3's unchanged (``tp * dp`` is the world
either way); stages 1 and 2 are in between, nearer one end the more of the 16
bytes they shard. A single prior "tp x0.6 on both parts" is right for the
first and wrong for the last: on the cluster simulator it put the optimum of
llama2-70b on two H100 nodes (tp = 2 under ZeRO-3) at 150 GiB where it needs 73,
from trials at tp = 8.

Relative to the baseline's stage ``b`` (all priors on the states part): a
stage ``k`` is the ratio of its bytes to stage ``b``'s at ``mp = 1`` (the
``zero=k`` main effect, which needs the world size); a doubling of tp or pp is
the mean slope of log bytes at stage ``b`` from 1 to 8 (the main effect), and
at stage ``k`` the slope there (the pair ``tp*zero=k`` holds the difference).
Expert parallelism divides only the experts' share of the states. Tensor parallelism also divides the activations it splits
(Korthikanti et al. 2022); pipeline parallelism does not (1F1B keeps ``pp``
micro-batches of ``L / pp`` layers in flight on the first stage), and expert
parallelism does not.

FSDP's hybrid strategies (``HYBRID_SHARD``, ``_HYBRID_SHARD_ZERO2``) are stage 3 and 2 within a node,
replicated across nodes: the same bytes with the node's ranks in place of the world.

Only emitted when the space has a sharding knob whose levels map to a stage:
without one the baseline's sharding is unknown and the total-peak priors in
:data:`~infrarsi.search.builtin_priors.KNOB_PRIORS` stand.
"""

from __future__ import annotations

import math
import re

from infrarsi.contract.model import KnobValue
from infrarsi.search.space import SearchSpace

#: Bytes of model states per parameter at each ZeRO stage: (divided by mp = tp * pp, divided by the world).
#: Mixed-precision Adam: 2 weights + 2 gradients + 12 fp32 master weights and moments (ZeRO paper, § 3).
BYTES_PER_PARAM: dict[int, tuple[float, float]] = {0: (16.0, 0.0), 1: (4.0, 12.0), 2: (2.0, 14.0), 3: (0.0, 16.0)}

#: The degrees a slope is averaged over (each of tp, pp, ep from 1 to 8).
DOUBLINGS: int = 3

#: sd of the log of a stage's states ratio (buffers, embeddings and what the runtime holds ride on the states part)
#: and of a slope per doubling (stages 1 and 2 are not log-linear in mp: their slope flattens as mp grows).
STAGE_SD, SLOPE_SD = 0.25, 0.1

#: The share of a MoE model's parameters that experts hold (Mixtral-8x7B 0.96, DeepSeek-MoE 16B 0.9; lower
#: with many dense layers).
EXPERT_SHARE: float = 0.8

#: Activations per doubling of tp: the GEMM and attention activations divide by tp, the norm and dropout
#: ones only with sequence parallelism (about a third of them for a Llama layer).
TP_ACTIVATIONS: tuple[float, float] = (0.6, 0.15)

SHARDING_KNOB = re.compile(r"^(zero|zero_stage|zero_optimization_stage|sharding_strategy|fsdp_sharding_strategy)$")
DEGREES: dict[str, re.Pattern[str]] = {
    "tp": re.compile(r"^(tp|tensor_parallel(_size)?|tensor_model_parallel_size)$"),
    "pp": re.compile(r"^(pp|pipeline_parallel(_size)?|pipeline_model_parallel_size)$"),
    "ep": re.compile(r"^(ep|expert_parallel(_size)?|expert_model_parallel_size)$"),
}
#: FSDP's strategies by the ZeRO stage they amount to (PyTorch FSDP docs).
FSDP_STAGES: dict[str, int] = {"NO_SHARD": 0, "SHARD_GRAD_OP": 2, "FULL_SHARD": 3}
#: FSDP's hybrid strategies: that stage within a node, replicated across nodes (the shard group is a node).
HYBRID_STAGES: dict[str, int] = {"HYBRID_SHARD": 3, "_HYBRID_SHARD_ZERO2": 2}


def stage_of(value: KnobValue) -> int | None:
    """The ZeRO stage a sharding knob's value selects (``2``, ``"FULL_SHARD"``), None if it names none."""
    text = str(value).strip().upper().removeprefix("SHARDINGSTRATEGY.")
    if text in FSDP_STAGES:
        return FSDP_STAGES[text]
    return int(text) if text in {"0", "1", "2", "3"} else None


def sharding_of(value: KnobValue, world: int, node: int | None) -> tuple[int, int] | None:
    """(ZeRO stage, ranks the states are sharded over) of a sharding knob's value on ``world`` ranks of
    ``node`` per node: the world, except for FSDP's hybrid strategies, which shard within a node (without a
    node size, or on one node, that is the world). None for a value that names no stage."""
    text = str(value).strip().upper().removeprefix("SHARDINGSTRATEGY.")
    if text in HYBRID_STAGES:
        return HYBRID_STAGES[text], node if node and 1 < node < world else world
    stage = stage_of(value)
    return None if stage is None else (stage, world)


def states_bytes(stage: int, world: int, *, mp: float = 1.0, ep: float = 1.0, moe: bool = False) -> float:
    """Bytes of states per parameter on one GPU at ``stage`` with model-parallel degree ``mp`` and expert
    degree ``ep`` (the experts' data-parallel group is ``dp / ep``, so full sharding still spans the world)."""
    sharded_by_mp, sharded_by_world = BYTES_PER_PARAM[stage]
    dense = sharded_by_mp / mp + sharded_by_world / world
    if not moe:
        return dense
    expert = sharded_by_mp / (mp * ep) + sharded_by_world / world
    return (1.0 - EXPERT_SHARE) * dense + EXPERT_SHARE * expert


def slope(stage: int, world: int, degree: str) -> float:
    """Mean log states ratio per doubling of ``degree`` (tp, pp or ep) from 1 to ``2**DOUBLINGS``."""
    top = 2.0 ** DOUBLINGS
    if degree == "ep":
        lo, hi = states_bytes(stage, world, moe=True), states_bytes(stage, world, ep=top, moe=True)
    else:
        lo, hi = states_bytes(stage, world), states_bytes(stage, world, mp=top)
    return math.log(hi / lo) / DOUBLINGS


def sharding_memory_priors(space: SearchSpace, world_size: int | None,
                           ranks_per_node: int | None = None) -> dict[str, tuple[float, float]]:
    """Per-part memory priors (:attr:`~infrarsi.search.features.Priors.memory_by_part`) for the ZeRO stages
    and model-parallel degrees of ``space``, relative to the stage of its baseline, for a job on
    ``world_size`` GPUs (``ranks_per_node`` per node, for FSDP's hybrid strategies); empty without a sharding
    knob or a world size."""
    knob = next((a for a in space.axes if SHARDING_KNOB.match(a.name)), None)
    if knob is None or not world_size or world_size < 2:
        return {}
    world = int(world_size)
    base = sharding_of(knob.knob.default, world, ranks_per_node)
    if base is None:
        return {}
    features = set(space.feature_names)
    levels = {level_name: sharding for level in knob.levels
              if (sharding := sharding_of(level, world, ranks_per_node)) is not None
              and (level_name := knob.knob.codec.feature(level)) in features}
    moe = any(DEGREES["ep"].match(f) for f in space.feature_names)
    out: dict[str, tuple[float, float]] = {
        f"{name} [states]": (math.log(states_bytes(*level, moe=moe) / states_bytes(*base, moe=moe)), STAGE_SD)
        for name, level in levels.items()}
    for degree, pattern in DEGREES.items():
        name = next((f for f in space.feature_names if pattern.match(f)), None)
        if name is None:
            continue
        out[f"{name} [states]"] = (slope(*base, degree), SLOPE_SD)
        if degree == "tp":
            out[f"{name} [activations]"] = (math.log(TP_ACTIVATIONS[0]), TP_ACTIVATIONS[1])
        for level_name, level in levels.items():
            out[f"{name}*{level_name} [states]"] = (slope(*level, degree) - slope(*base, degree), SLOPE_SD)
    return out
