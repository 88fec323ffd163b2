"""The built-in proposer's priors on knob values: expected effect on step time and peak memory.

Log-ratio means and standard deviations, keyed by the search space's feature
names (``dtype=bf16``, ``micro_batch`` per doubling, …). Patches carry their own
priors (``bot/patching/catalog.py``). Where each figure comes from is in docs/priors.md;
they are deliberately wide: live trials revise them, and the report shows how.
"""

from __future__ import annotations

import math
import re

from infrarsi.parallel import group_placement, pipeline_bubble, states_column
from infrarsi.parallel.roles import ROLES
from infrarsi.parallel.sharding_priors import sharding_memory_priors
from infrarsi.search.derived import OFF_NODE, PIPELINE_BUBBLE
from infrarsi.search.features import Priors
from infrarsi.search.space import SearchSpace

# (feature pattern, time ratio, time sd of the log, memory ratio, memory sd of the log)
KNOB_PRIORS: tuple[tuple[str, float, float, float, float], ...] = (
    (r"^(dtype|precision|amp_dtype|mixed_precision)=(bf16|bfloat16)$", 0.6, 0.3, 0.85, 0.2),
    (r"^(dtype|precision|amp_dtype|mixed_precision)=(fp16|float16)$", 0.6, 0.3, 0.85, 0.2),
    (r"^(compile|torch_compile|use_compile)=True$", 0.85, 0.3, 0.95, 0.2),
    (r"^(micro_?batch(_size)?|mbs|micro_bs|per_device_(train_)?batch_size)$", 0.92, 0.1, 1.3, 0.2),
    (r"^(grad_ckpt|gradient_checkpointing|activation_checkpointing|checkpoint_activations|recompute)=True$",
     1.25, 0.1, 0.7, 0.15),
    (r"^(optimizer|optim|optimizer_impl)=.*foreach.*$", 0.95, 0.05, 1.02, 0.03),
    (r"^(optimizer|optim|optimizer_impl)=.*fused.*$", 0.93, 0.06, 1.0, 0.03),
    (r"^(num_workers|workers|dataloader_workers)$", 0.97, 0.1, 1.05, 0.05),
    # Distributed training (Megatron-LM / DeepSpeed / FSDP knob names); docs/priors.md § Distributed.
    (r"^(tp|tensor_parallel(_size)?|tensor_model_parallel_size)$", 1.05, 0.15, 0.6, 0.2),
    (r"^(pp|pipeline_parallel(_size)?|pipeline_model_parallel_size)$", 1.08, 0.15, 0.75, 0.25),
    (r"^(ep|expert_parallel(_size)?|expert_model_parallel_size)$", 1.0, 0.1, 0.85, 0.2),
    (r"^(vpp|virtual_pipeline(_stages)?|num_layers_per_virtual_pipeline_stage)$", 0.97, 0.08, 1.05, 0.1),
    (r"^(recompute|recompute_granularity|activation_recompute)=(none|off|False)$", 0.75, 0.1, 2.5, 0.6),
    (r"^(recompute|recompute_granularity|activation_recompute)=selective$", 0.8, 0.1, 1.8, 0.5),
    (r"^(zero|zero_stage)=0$", 0.85, 0.15, 3.0, 0.8),
    (r"^(zero|zero_stage)=1$", 0.85, 0.15, 2.0, 0.6),
    (r"^(zero|zero_stage)=2$", 0.9, 0.15, 1.7, 0.5),
    (r"^(sequence_parallel)=True$", 0.98, 0.05, 0.9, 0.1),
    (r"^(overlap_grad_reduce)=True$", 0.93, 0.07, 1.0, 0.03),
    (r"^(overlap_param_gather)=True$", 0.93, 0.07, 1.02, 0.05),
    (r"^(bucket_mb|bucket_cap_mb|ddp_bucket_size)$", 0.99, 0.03, 1.01, 0.03),
)

# Step-time priors of pp and vpp when the space has the pipeline-bubble column (infrarsi/parallel/pipeline_bubble.py):
# point-to-point sends per micro-batch (and per virtual stage) only, the bubble being the column's.
PIPELINE_TIME_WITH_BUBBLE: tuple[tuple[str, float, float], ...] = (
    (ROLES["pp"].pattern, 1.02, 0.1),
    (ROLES["vpp"].pattern, 1.01, 0.05),
)


# (feature pattern, the part of peak memory it acts on): model states (parameters, gradients,
# optimizer state and what shards them) or activations. A feature named nowhere acts on both.
MEMORY_PARTS: tuple[tuple[str, str], ...] = (
    (r"^(micro_?batch(_size)?|mbs|micro_bs|per_device_(train_)?batch_size)$", "activations"),
    (r"^(grad_ckpt|gradient_checkpointing|activation_checkpointing|checkpoint_activations)=", "activations"),
    (r"^(recompute|recompute_granularity|activation_recompute)=", "activations"),
    (r"^(sequence_parallel)=", "activations"),
    (r"^(vpp|virtual_pipeline(_stages)?|num_layers_per_virtual_pipeline_stage)$", "activations"),
    (r"^patch:.*(attention|sdpa|flash|cross_entropy|gelu|norm|checkpoint).*$", "activations"),
    (r"^(zero|zero_stage)=", "states"),
    (rf"^{states_column.MODEL_STATES}$", "states"),
    (r"^(ep|expert_parallel(_size)?|expert_model_parallel_size)$", "states"),
    # 1F1B: the first stage keeps pp micro-batches of L/pp layers in flight, so pp divides the states only
    (r"^(pp|pipeline_parallel(_size)?|pipeline_model_parallel_size)$", "states"),
    (r"^(bucket_mb|bucket_cap_mb|ddp_bucket_size)$", "states"),
    (r"^(overlap_param_gather)=", "states"),
    (r"^(optimizer|optim|optimizer_impl)=", "states"),
    (r"^patch:.*(optimizer|zero_grad).*$", "states"),
)


# (feature pattern, the part of step time it acts on): compute (the micro-batches' kernels,
# recomputation) or communication that compute does not hide. A feature named nowhere acts on both
# (tp, pp, ep, micro_batch change both: the bubble stretches all of a micro-batch, fewer micro-batches
# mean fewer ZeRO-2/3 collectives). docs/priors.md § Time parts.
TIME_PARTS: tuple[tuple[str, str], ...] = (
    (r"^(grad_ckpt|gradient_checkpointing|activation_checkpointing|checkpoint_activations)=", "compute"),
    (rf"^{PIPELINE_BUBBLE}$", "compute"),  # idle slots of a micro-batch's whole work
    (rf"^{OFF_NODE}", "communication"),  # collectives over the network instead of NVLink
    (r"^(recompute|recompute_granularity|activation_recompute)=", "compute"),
    (r"^(sequence_parallel)=", "compute"),
    (r"^(compile|torch_compile|use_compile)=", "compute"),
    (r"^(optimizer|optim|optimizer_impl)=", "compute"),
    (r"^patch:.*comm.*overlap.*$", "communication"),
    (r"^patch:.*(attention|sdpa|flash|cross_entropy|gelu|norm|gemm|checkpoint|compile|optimizer).*$",
     "compute"),
    (r"^(zero|zero_stage)=", "communication"),
    (r"^(overlap_grad_reduce|overlap_param_gather)=", "communication"),
    (r"^(bucket_mb|bucket_cap_mb|ddp_bucket_size)$", "communication"),
)


def time_part(feature: str) -> str | None:
    """The part of step time ``feature`` acts on by :data:`TIME_PARTS` (first match), None for both."""
    return next((part for pattern, part in TIME_PARTS if re.match(pattern, feature)), None)


def memory_part(feature: str) -> str | None:
    """The part of peak memory ``feature`` acts on by :data:`MEMORY_PARTS` (first match), None for both."""
    return next((part for pattern, part in MEMORY_PARTS if re.match(pattern, feature)), None)


def builtin_priors(space: SearchSpace, world_size: int | None = None, ranks_per_node: int | None = None) -> Priors:
    """Priors for every knob feature of ``space`` that the table knows; the rest get the engine's default.

    With the job's ``world_size`` (and ``ranks_per_node``, for FSDP's hybrid sharding), a ZeRO/FSDP stage knob
    and the model-parallel degrees get per-part memory priors worked out from how many bytes per parameter each
    stage keeps (:mod:`.sharding_priors`)."""
    time: dict[str, tuple[float, float]] = {}
    memory: dict[str, tuple[float, float]] = {}
    parts = {name: part for name in space.feature_names if (part := memory_part(name))}
    time_parts = {name: part for name in space.feature_names if (part := time_part(name))}
    for name in space.feature_names:
        if name.startswith("patch:"):
            continue
        for pattern, t, t_sd, m, m_sd in KNOB_PRIORS:
            if re.match(pattern, name):
                time[name] = (math.log(t), t_sd)
                memory[name] = (math.log(m), m_sd)
                break
    if PIPELINE_BUBBLE in space.feature_names:
        time[PIPELINE_BUBBLE] = pipeline_bubble.TIME_PRIOR
        memory[PIPELINE_BUBBLE] = pipeline_bubble.MEMORY_PRIOR
        # The column carries the bubble; what pipelining and virtual stages cost besides is the sends.
        for name in space.feature_names:
            for pattern, t, t_sd in PIPELINE_TIME_WITH_BUBBLE:
                if re.match(pattern, name):
                    time[name] = (math.log(t), t_sd)
    for name in space.feature_names:
        if name.startswith(OFF_NODE):
            time[name] = group_placement.TIME_PRIORS[name.removeprefix(OFF_NODE)]
            memory[name] = group_placement.MEMORY_PRIOR
    by_part = sharding_memory_priors(space, world_size, ranks_per_node)
    if states_column.MODEL_STATES in space.feature_names:
        # the column carries the states' bytes; a stage's and a degree's own states priors become residuals
        time[states_column.MODEL_STATES] = (0.0, 0.02)
        memory[states_column.MODEL_STATES] = states_column.TOTAL_PRIOR
        by_part = states_column.residual_priors(by_part)
    return Priors(time=time, memory=memory, memory_parts=parts, time_parts=time_parts, memory_by_part=by_part)
