"""The parallel layouts a launcher rejects before the first step, as ``forbid`` constraints.

Megatron-LM's ``initialize_model_parallel`` raises when the world size is not
divisible by ``tp x pp x cp``, and when the expert-parallel size does not
divide what is left (``world / (tp x pp)``, the data- and context-parallel
ranks the experts are spread over); its argument checks reject virtual
pipeline stages without a pipeline, and its micro-batch calculator a global
batch that does not split into whole micro-batches per replica. Each such
trial is a crash that costs a launch of the whole job, and the crash model
would need several to learn a rule the contract's ``[launch]`` already decides. So, when the bot launches the
ranks itself (torchrun, Slurm: the world size is known and at least 2), the
combinations of knob levels that break these rules are left out of the space.

Nothing is left out when the baseline itself breaks a rule: it ran in the
doctor, so the world the bot knows is not the job's (a command that starts its
own ranks), and guessing would forbid good layouts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from infrarsi.parallel.roles import find_roles
from infrarsi.contract.model import Constraint, Knob
from infrarsi.search.space import KnobAxis


#: Each rule: the roles it reads, and why a layout of them breaks it on ``world`` ranks (None: it does not).
RULES: tuple[tuple[tuple[str, ...], Callable[[dict[str, int], int], str | None]], ...] = (
    (("tp", "pp", "cp"), lambda v, world: None if world % (v["tp"] * v["pp"] * v["cp"]) == 0 else
     f"world size {world} is not divisible by the model-parallel size {v['tp'] * v['pp'] * v['cp']}"),
    (("tp", "pp", "ep"), lambda v, world: None if world % (v["tp"] * v["pp"])  # the world-size rule's
     or (world // (v["tp"] * v["pp"])) % v["ep"] == 0
     else f"expert-parallel size {v['ep']} does not divide world / (tp x pp) = {world // (v['tp'] * v['pp'])}"),
    (("pp", "vpp"), lambda v, world: "virtual pipeline stages need pipeline parallelism"
     if v["vpp"] > 1 and v["pp"] == 1 else None),
)


def _batch_rule(global_batch: int) -> tuple[tuple[str, ...], Callable[[dict[str, int], int], str | None]]:
    """Megatron-LM's micro-batch calculator: the global batch must split into whole micro-batches on every
    data-parallel replica, ``global_batch % (dp x micro_batch) == 0`` with ``dp = world / (tp x pp x cp)``."""
    def breaks(v: dict[str, int], world: int) -> str | None:
        mp = v["tp"] * v["pp"] * v["cp"]
        if world % mp:
            return None  # the world-size rule's
        dp = world // mp
        return None if global_batch % (dp * v["micro_batch"]) == 0 else (
            f"global batch {global_batch} is not divisible by micro-batch {v['micro_batch']} x data-parallel "
            f"size {dp}")
    return ("tp", "pp", "cp", "micro_batch"), breaks


def launcher_constraints(knobs: Sequence[Knob], world_size: int | None,
                         global_batch: int | None = None) -> tuple[Constraint, ...]:
    """``forbid`` constraints for the layouts of ``knobs`` a launcher rejects on ``world_size`` ranks, each
    naming only the knobs of the rule it breaks; with the contract's ``global_batch``
    (:func:`~infrarsi.parallel.roles.fixed_global_batch`) also the micro-batches that do not split it."""
    if not world_size or world_size < 2:
        return ()
    roles = find_roles(knobs)
    by_name = {k.name: k for k in knobs}
    present = {role: by_name[name] for role in ("tp", "pp", "cp", "ep", "vpp", "micro_batch")
               if (name := roles.get(role)) is not None and by_name[name].kind == "int"}
    if not present.keys() & {"tp", "pp", "cp", "ep"}:
        return ()
    rules = RULES + ((_batch_rule(global_batch),) if global_batch else ())
    default = {role: int(knob.default) for role, knob in present.items()}
    if any(_check(rule, default, world_size) for rule in rules):
        return ()  # the baseline ran: the world the bot knows is not the job's (module docstring)
    out = []
    for rule in rules:
        involved = [r for r in rule[0] if r in present]
        if not involved:
            continue
        for combo in itertools.product(*(KnobAxis.of(present[r]).levels for r in involved)):
            values = {r: int(v) for r, v in zip(involved, combo)}
            reason = _check(rule, values, world_size)
            if reason:
                out.append(Constraint(kind="forbid", when=tuple((present[r].name, v) for r, v in zip(involved, combo)),
                                      reason=reason))
    return tuple(out)


def _check(rule: tuple[tuple[str, ...], Callable[[dict[str, int], int], str | None]], values: dict[str, int],
           world: int) -> str | None:
    """``rule``'s reason for this layout (roles it does not name at 1), None if it holds."""
    roles, breaks = rule
    return breaks({r: max(int(values.get(r, 1)), 1) for r in roles}, world)
