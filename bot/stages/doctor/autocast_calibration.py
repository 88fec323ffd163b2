"""What a lower precision the contract's policy allows legitimately moves, measured with the catalog's autocast.

A dtype knob's lower value is run by the doctor to measure how far a legitimate
dtype change moves the step-1 loss, the gradients, the weights and each loss
(:func:`bot.stages.doctor.baseline.calibrate_work`). A job without a dtype flag
whose ``[precision] allow`` lists bf16 has no such value: the doctor runs the
baseline once, witnessed, with the catalog's autocast patch for that dtype
instead (the same patch the search will try), and candidates in bf16 are held to
what that run moved. Where the device only emulates the dtype the run is skipped:
the search leaves bf16 out there anyway (:mod:`infrarsi.dtype_levers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from bot.stages.run.candidate import TrialContext
from infrarsi.doctor import policy_lower_dtypes
from infrarsi.dtype_levers import emulated_dtypes
from infrarsi.dtypes import short_name
from infrarsi.patches import PatchSpec
from infrarsi.trial_record import Candidate, Outcome, TrialRecord

#: The catalog's autocast patches per dtype, in the order the doctor prefers them: around the training loop's
#: forward and loss, inside the model's forward, the frameworks' own switches.
AUTOCAST_PATCHES: dict[str, tuple[str, ...]] = {
    "bfloat16": ("autocast_bf16", "autocast_forward_bf16", "hf_bf16", "lightning_bf16_precision"),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyRun:
    """One calibration run: the dtype, the patch it ran with, the trial (None: not run, ``note`` says why)."""

    dtype: str
    patch: str | None
    record: TrialRecord | None
    note: str = ""


def autocast_patch(patches: Mapping[str, PatchSpec], dtype: str) -> PatchSpec | None:
    """The catalog's autocast patch for ``dtype`` that applies to this repo (``patches``: the applicable ones)."""
    return next((patches[pid] for pid in AUTOCAST_PATCHES.get(dtype, ()) if pid in patches), None)


def policy_runs(ctx: TrialContext, *, run_id: str, peaks: Mapping[str, float] | None = None,
                progress: Callable[[str], None] = lambda _: None) -> list[PolicyRun]:
    """A witnessed baseline run under the autocast patch of each dtype the policy allows below the baseline's
    (none where the device emulates the dtype, or no autocast patch applies: the note says so)."""
    out: list[PolicyRun] = []
    emulated = emulated_dtypes(peaks or {})
    for dtype in policy_lower_dtypes(ctx.contract):
        short = short_name(dtype)
        if short in emulated:
            out.append(PolicyRun(dtype=dtype, patch=None, record=None, note=(
                f"[precision] allows {dtype}, but this device emulates it ({emulated[short]:.2g}x fp32's matmul "
                "rate): no calibration run, and the search leaves it out here")))
            continue
        spec = autocast_patch(ctx.patches, dtype)
        if spec is None:
            out.append(PolicyRun(dtype=dtype, patch=None, record=None, note=(
                f"[precision] allows {dtype}, but no catalog autocast patch applies to this repo's editable scope "
                f"({', '.join(AUTOCAST_PATCHES.get(dtype, ())) or 'none known'}): candidates in {dtype} are held to "
                "assert_close's defaults only")))
            continue
        progress(f"baseline with +{spec.id}: what the {dtype} the contract's [precision] allows legitimately moves")
        run = replace(ctx, patches={**ctx.patches, spec.id: spec}).run(
            run_id, Candidate.of(ctx.contract.defaults(), (spec.id,)), witness=True)
        note = "" if run.outcome is Outcome.OK else (
            f"the baseline with +{spec.id} did not run ({run.outcome.value}: {run.reason[:200]}); candidates in "
            f"{dtype} are held to assert_close's defaults only")
        out.append(PolicyRun(dtype=dtype, patch=spec.id, record=run, note=note))
    return out
