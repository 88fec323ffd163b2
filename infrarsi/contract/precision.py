"""The precision policy (``[precision]``): which dtypes a candidate's matrix products may run in, knobs aside.

Whether bf16 is the same task is the user's call. A job with a dtype knob says so
through the knob's values; most public training scripts have none, so this table
says it for them: ``allow = ["float32", "bfloat16"]`` lets the search try the
catalog's autocast patches (the doctor then measures how far a bf16 baseline run
moves the loss, the gradients and the weights, and holds a bf16 candidate to that).
The dtypes a candidate may compute in are this policy, the baseline's own and
whatever a dtype knob offers (:func:`infrarsi.doctor.allowed_dtypes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from infrarsi.contract.strict_toml import Table, describe
from infrarsi.dtypes import PRECISION_RANK, TORCH_NAMES

#: The names a policy may list (torch's), in order of precision.
POLICY_DTYPES = tuple(sorted((d for d in PRECISION_RANK if d != "tf32"), key=lambda d: (PRECISION_RANK[d], d)))


@dataclass(frozen=True, kw_only=True, slots=True)
class PrecisionPolicy:
    """``allow``: torch dtype names; empty (no ``[precision]`` table): the baseline's own and the knobs' only."""

    allow: tuple[str, ...] = ()

    def lower_than(self, baseline: str) -> tuple[str, ...]:
        """The allowed dtypes of lower precision than ``baseline`` (a torch name)."""
        return tuple(d for d in self.allow if PRECISION_RANK.get(d, 1) > PRECISION_RANK.get(baseline, 1))


def parse_precision(t: Table) -> PrecisionPolicy:
    """``[precision]``, strictly: ``allow`` is a non-empty array of dtype names, each once."""
    raw = t.raw("allow", None)
    t.finish()
    if raw is None:
        return PrecisionPolicy()
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise t.error("allow", f"expected an array of dtype names (e.g. [\"float32\", \"bfloat16\"]), got "
                      f"{describe(raw)}")
    if not raw:
        raise t.error("allow", "expected at least one dtype (the baseline's own, e.g. [\"float32\"])")
    names: list[str] = []
    for value in raw:
        name = TORCH_NAMES.get(value.lower(), value)
        if name not in POLICY_DTYPES:
            raise t.error("allow", f"{value!r} is not a dtype a matrix product runs in (one of: "
                          f"{', '.join(POLICY_DTYPES)})")
        if name in names:
            raise t.error("allow", f"{value!r} is listed twice")
        names.append(name)
    return PrecisionPolicy(allow=tuple(names))


#: What ``init`` writes above the table (and docs/contract.md repeats).
DRAFT_NOTE = ("drafted: the dtypes a candidate's matrix products may run in besides what the knobs offer: the "
              "baseline's own only. Adding \"bfloat16\" is your call (another numeric result): the search then tries "
              "bf16 autocast where this device runs it natively, held to the tolerances the doctor measures with "
              "it, and the pull request says so (docs/contract.md)")
