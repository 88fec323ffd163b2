"""The pipeline-bubble column for a contract whose knobs include pipeline parallelism.

Which knob is which is read from the names Megatron-LM, DeepSpeed and NeMo
give them (``pp``, ``pipeline_model_parallel_size``, ``micro_batch_size``,
``gradient_accumulation_steps``, ...); how many micro-batches a step holds
from the contract: a gradient-accumulation knob is that count, else the global
batch a ``divides`` constraint on the micro-batch knob names (what
``infrarsi init`` writes for a fixed global batch), else a global batch on the
workload's command (Megatron-LM's ``--global-batch-size 256``, NeMo's
``model.global_batch_size=256``), with the job's world size (roles:
:mod:`.parallel_roles`). Without a pipeline knob, or without any source of the
count, there is no column and the search is as before. The formula:
:mod:`infrarsi.search.derived`.

Virtual stages count only under a name that means "stages per rank"
(``vpp``, ``virtual_pipeline_model_parallel_size``): Megatron's
``num_layers_per_virtual_pipeline_stage`` is the inverse and is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from infrarsi.parallel.roles import find_roles, fixed_global_batch
from infrarsi.contract.model import Constraint, Knob
from infrarsi.search.derived import DerivedFeature, PipelineRoles, pipeline_bubble

#: Prior on the column's coefficient for step time (log units per unit of the column): 1 is the formula
#: exactly; the sd allows what the formula leaves out (1F1B's warm-up sends, a last stage heavier with the
#: output head, schedules other than 1F1B).
TIME_PRIOR: tuple[float, float] = (1.0, 0.15)
#: The bubble is idle time: it holds no memory (how many micro-batches are in flight is the pp knob's).
MEMORY_PRIOR: tuple[float, float] = (0.0, 0.02)


def bubble_features(knobs: Sequence[Knob], constraints: Sequence[Constraint], world_size: int | None,
                    argv: Sequence[str] = ()) -> tuple[DerivedFeature, ...]:
    """The bubble column for these knobs, or none (no pipeline knob, or the micro-batch count unknown).
    ``argv``: the workload's command and arguments, where a fixed global batch may be given."""
    found = find_roles(knobs)
    if found["pp"] is None:
        return ()
    micro = found["micro_batch"]
    global_batch = fixed_global_batch(knobs, constraints, argv)
    # with one rank the bot knows nothing of the job's own ranks (a command that starts them): dp is unknown
    if found["accumulation"] is None and (global_batch is None or (world_size or 0) < 2):
        return ()
    roles = PipelineRoles(pp=found["pp"], world_size=world_size or 1, global_batch=global_batch,
                          tp=found["tp"], cp=found["cp"], vpp=found["vpp"], micro_batch=micro,
                          accumulation=found["accumulation"])
    feature = pipeline_bubble(roles)
    return (feature,) if feature else ()
