"""Which contract knob sets which parallel degree or batch role, by the names Megatron-LM, DeepSpeed and NeMo use.

A knob's role is read from its name or from the leaf of how it is passed (a
knob named ``model_pp`` that passes ``model.pipeline_model_parallel_size``,
one named ``tp`` behind ``--tensor-model-parallel-size``). Used for what the
bot derives from those roles: the pipeline-bubble column
(:mod:`.pipeline_bubble`) and the launcher's divisibility checks
(:mod:`.launcher_checks`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from infrarsi.contract.entry import given_values
from infrarsi.parallel.sharding_priors import DEGREES
from infrarsi.contract.model import Constraint, Knob

ROLES: dict[str, re.Pattern[str]] = {
    **DEGREES,
    "cp": re.compile(r"^(cp|context_parallel(_size)?)$"),
    "vpp": re.compile(r"^(vpp|virtual_pipeline(_stages|_model_parallel_size)?|num_virtual_stages_per_pipeline_rank)$"),
    "micro_batch": re.compile(r"^(micro_?batch(_size)?|mbs|micro_bs|train_micro_batch_size_per_gpu)$"),
    "accumulation": re.compile(r"^(grad(ient)?_accum(ulation)?(_steps)?|accumulate_grad_batches|accum_steps)$"),
}

#: A global batch on the command line: sequences per optimizer step across data-parallel replicas.
GLOBAL_BATCH = re.compile(r"^(global_batch(_size)?|gbs)$")


def find_roles(knobs: Sequence[Knob]) -> dict[str, str | None]:
    """For each role of :data:`ROLES`, the name of the first knob that plays it, else None."""
    return {role: next((k.name for k in knobs if any(pattern.match(n) for n in spellings(k))), None)
            for role, pattern in ROLES.items()}


def spellings(knob: Knob) -> tuple[str, ...]:
    """The knob's name and the leaf of how it is passed (``--pipeline-model-parallel-size``,
    ``model.pipeline_model_parallel_size``), lower case with underscores."""
    return spellings_of(knob.name, knob.flag or knob.override or "")


def spellings_of(name: str, passed: str) -> tuple[str, ...]:
    """``name`` and the leaf of ``passed`` (a flag, an override or a dotted key), lower case with underscores."""
    leaf = passed.lstrip("-+~").rsplit(".", 1)[-1].replace("-", "_").lower()
    return (name, leaf) if leaf else (name,)


def fixed_global_batch(knobs: Sequence[Knob], constraints: Sequence[Constraint], argv: Sequence[str]) -> int | None:
    """The global batch (sequences per optimizer step over every data-parallel replica) the contract fixes for
    its micro-batch knob: a ``divides`` constraint on that knob (what ``infrarsi init`` writes), else one on the
    workload's command (``--global-batch-size 256``, ``--global_batch_size=256``, ``model.global_batch_size=256``);
    None without a micro-batch knob or either source."""
    micro = find_roles(knobs)["micro_batch"]
    if micro is None:
        return None
    given = next((c.value for c in constraints if c.kind == "divides" and c.knob == micro), None)
    if given is not None:
        return given
    for token, value in given_values(list(argv)).items():
        leaf = token.lstrip("-+~").rsplit(".", 1)[-1].replace("-", "_")
        if GLOBAL_BATCH.match(leaf) and value.isdigit() and int(value) > 0:
            return int(value)
    return None
