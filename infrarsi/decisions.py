"""What a knob or a code patch decides: two settings that decide the same thing are never in one candidate.

The optimizer's implementation can be chosen by a launch knob (``--optimizer
adamw_fused``) or by a patch that rewrites the optimizer's construction; the
compute dtype by a dtype knob or an autocast patch; compilation by a compile
knob or a compile patch. A candidate holding both would not say which one takes
effect, so the search space refuses it (:class:`~infrarsi.search.space.SearchSpace`):
a patch that decides ``X`` only combines with every knob that decides ``X`` at
its default, and two patches that decide the same ``X`` conflict.

A patch declares it (``PatchSpec.decides``; the built-in catalog does, in
``bot/patching/catalog.py``); a knob declares it in the contract
(``decides = ["optimizer_impl"]``) or, when the contract says nothing, by its
name through :data:`KNOB_DECISIONS`. These declarations compose with
``conflicts_with``: a candidate is refused if either says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from infrarsi.contract.model import Knob, KnobValue
from infrarsi.patches import PatchSpec

#: The things settings decide, with what each means.
DECISIONS = {
    "optimizer_impl": "the optimizer's implementation (for-loop, foreach, fused)",
    "compute_dtype": "the dtype matrix products run in (a dtype knob, autocast)",
    "compile": "whether the model is compiled (torch.compile)",
    "activation_checkpointing": "whether activations are recomputed in backward",
}

#: A knob whose contract entry declares nothing decides by its name (its last ``_``/``.`` part or the whole
#: name, case-insensitive).
KNOB_DECISIONS: tuple[tuple[str, str], ...] = (
    (r"(optimizer|optim|optimizer_impl|opt_impl|fused_optimizer|foreach)", "optimizer_impl"),
    (r"(dtype|precision|amp_dtype|mixed_precision|amp|autocast|bf16|fp16)", "compute_dtype"),
    (r"(compile|torch_compile|use_compile|compile_model)", "compile"),
    (r"(grad_ckpt|gradient_checkpointing|activation_checkpointing|checkpointing|recompute)",
     "activation_checkpointing"),
)


def knob_decides(knob: Knob) -> tuple[str, ...]:
    """What ``knob`` decides: its contract declaration, else the name table's row."""
    if knob.decides:
        return knob.decides
    for pattern, decision in KNOB_DECISIONS:
        # The name's last part decides: a Hydra/Lightning key drafted as ``trainer_precision`` is a precision.
        if re.fullmatch(rf"(?:.*[._])?{pattern}", knob.name, flags=re.IGNORECASE):
            return (decision,)
    return ()


def patch_knob_clashes(knobs: Iterable[Knob], patches: Iterable[PatchSpec]) -> dict[str, tuple[tuple[str, KnobValue], ...]]:
    """Per patch id, the knobs (with their defaults) that decide something the patch decides: with the patch
    in a candidate, each of them must stay at its default."""
    knobs = list(knobs)
    out: dict[str, tuple[tuple[str, KnobValue], ...]] = {}
    for spec in patches:
        clash = tuple((k.name, k.default) for k in knobs if set(knob_decides(k)) & set(spec.decides))
        if clash:
            out[spec.id] = clash
    return out


def patch_patch_clashes(patches: Sequence[PatchSpec]) -> list[tuple[str, str]]:
    """Pairs of patches that decide the same thing (they conflict)."""
    return [(a.id, b.id) for i, a in enumerate(patches) for b in patches[i + 1:] if set(a.decides) & set(b.decides)]


def clashes(values: Mapping[str, KnobValue], patches: Iterable[str], knobs: Iterable[Knob],
            specs: Mapping[str, PatchSpec]) -> list[str]:
    """Why a candidate holds two settings that decide the same thing (empty when it does not)."""
    chosen = [specs[p] for p in patches if p in specs]
    out = []
    for pid, pairs in patch_knob_clashes(knobs, chosen).items():
        for name, default in pairs:
            value = values.get(name, default)
            if value != default or isinstance(value, bool) != isinstance(default, bool):
                shared = set(specs[pid].decides)
                out.append(f"patch {pid} and knob {name}={value!r} both decide {', '.join(sorted(shared))}")
    out += [f"patches {a} and {b} both decide {', '.join(sorted(set(specs[a].decides) & set(specs[b].decides)))}"
            for a, b in patch_patch_clashes(chosen)]
    return out
