"""What a knob or a code patch decides: the vocabulary of the conflict rule (:mod:`infrarsi.conflicts`).

The optimizer's implementation can be chosen by a launch knob (``--optimizer
adamw_fused``) or by a patch that rewrites the optimizer's construction; the
compute dtype by a dtype knob or an autocast patch; compilation by a compile
knob or a compile patch. A candidate holding both would not say which one takes
effect, so :mod:`infrarsi.conflicts` refuses it: a patch that decides ``X`` only
combines with every knob that decides ``X`` at its default, and two patches that
decide the same ``X`` conflict.

A patch declares it (``PatchSpec.decides``; the built-in catalog does, in
``bot/patching/catalog.py``, and writes no conflict list besides); a knob
declares it in the contract (``decides = ["optimizer_impl"]``) or, when the
contract says nothing, by its name through :data:`KNOB_DECISIONS`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from infrarsi.contract.model import Knob

#: The things settings decide, with what each means.
DECISIONS = {
    "optimizer_impl": "the optimizer's implementation (for-loop, foreach, fused)",
    "compute_dtype": "the dtype matrix products run in (a dtype knob, autocast)",
    "compile": "whether the model is compiled (torch.compile)",
    "activation_checkpointing": "whether activations are recomputed in backward",
    "tf32_matmul": "whether fp32 matrix products run in TF32 on tensor cores",
    "cudnn_benchmark": "whether cuDNN autotunes its convolution algorithms",
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


def moved_decisions(knobs: Sequence[Knob], values: Mapping[str, object]) -> tuple[str, ...]:
    """What the knobs set off their defaults in ``values`` decide (the verdict lets a knob that decides the
    optimizer's implementation change its class, one that decides TF32 let float32 products run in it)."""
    moved: set[str] = set()
    for knob in knobs:
        if knob.name in values and values[knob.name] != knob.default:
            moved.update(knob_decides(knob))
    return tuple(sorted(moved))
