"""The pipeline-bubble column for a contract whose knobs include pipeline parallelism.

Which knob is which is read from the names Megatron-LM, DeepSpeed and NeMo
give them (``pp``, ``pipeline_model_parallel_size``, ``micro_batch_size``,
``gradient_accumulation_steps``, ...); how many micro-batches a step holds
from the contract: a gradient-accumulation knob is that count, else the global
batch a ``divides`` constraint on the micro-batch knob names (what
``infrarsi init`` writes for a fixed global batch), else a global batch on the
workload's command (Megatron-LM's ``--global-batch-size 256``, NeMo's
``model.global_batch_size=256``), with the job's world size. A knob's role is
read from its name or from the leaf of its flag or Hydra override (a knob
named ``model_pp`` that passes ``model.pipeline_model_parallel_size``).
Without a pipeline knob, or without any source of the count, there is no
column and the search is as before. The formula: :mod:`infrarsi.search.derived`.

Virtual stages count only under a name that means "stages per rank"
(``vpp``, ``virtual_pipeline_model_parallel_size``): Megatron's
``num_layers_per_virtual_pipeline_stage`` is the inverse and is left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bot.stages.init.knob_tables import given_values
from bot.stages.run.sharding_priors import DEGREES
from infrarsi.contract.model import Constraint, Knob
from infrarsi.search.derived import DerivedFeature, PipelineRoles, pipeline_bubble

ROLES: dict[str, re.Pattern[str]] = {
    "cp": re.compile(r"^(cp|context_parallel(_size)?)$"),
    "vpp": re.compile(r"^(vpp|virtual_pipeline(_stages|_model_parallel_size)?|num_virtual_stages_per_pipeline_rank)$"),
    "micro_batch": re.compile(r"^(micro_?batch(_size)?|mbs|micro_bs|train_micro_batch_size_per_gpu)$"),
    "accumulation": re.compile(r"^(grad(ient)?_accum(ulation)?(_steps)?|accumulate_grad_batches|accum_steps)$"),
}

#: A global batch on the command line: sequences per optimizer step across data-parallel replicas.
GLOBAL_BATCH = re.compile(r"^(global_batch(_size)?|gbs)$")

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
    found = {role: next((k.name for k in knobs if any(pattern.match(n) for n in _spellings(k))), None)
             for role, pattern in {**DEGREES, **ROLES}.items()}
    if found["pp"] is None:
        return ()
    micro = found["micro_batch"]
    global_batch = next((c.value for c in constraints if c.kind == "divides" and c.knob == micro), None) \
        if micro else None
    if global_batch is None and micro:
        global_batch = global_batch_in(argv)
    if found["accumulation"] is None and (global_batch is None or not world_size):
        return ()
    roles = PipelineRoles(pp=found["pp"], world_size=world_size or 1, global_batch=global_batch,
                          tp=found["tp"], cp=found["cp"], vpp=found["vpp"], micro_batch=micro,
                          accumulation=found["accumulation"])
    feature = pipeline_bubble(roles)
    return (feature,) if feature else ()


def global_batch_in(argv: Sequence[str]) -> int | None:
    """The global batch a command fixes (``--global-batch-size 256``, ``--global_batch_size=256``,
    ``model.global_batch_size=256``), None if it names none."""
    for token, value in given_values(list(argv)).items():
        leaf = token.lstrip("-+~").rsplit(".", 1)[-1].replace("-", "_")
        if GLOBAL_BATCH.match(leaf) and value.isdigit() and int(value) > 0:
            return int(value)
    return None


def _spellings(knob: Knob) -> tuple[str, ...]:
    """The knob's name and the leaf of how it is passed (``--pipeline-model-parallel-size``,
    ``model.pipeline_model_parallel_size``), lower case with underscores."""
    passed = knob.flag or knob.override or ""
    leaf = passed.lstrip("-+~").rsplit(".", 1)[-1].replace("-", "_").lower()
    return (knob.name, leaf) if leaf else (knob.name,)
