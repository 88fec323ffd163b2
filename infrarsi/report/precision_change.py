"""The precision change a promotion makes, in words for the pull request: a reviewer approves another numeric
result only knowingly.

A winner whose matrix products the witness saw run in a lower precision than the
baseline's (bf16 autocast on an fp32 job) computes another numeric result, which
the contract allowed — through ``[precision] allow`` or a dtype knob — and which
verification held to the tolerances the doctor measured for that dtype. The pull
request says all three.
"""

from __future__ import annotations

from collections.abc import Sequence

from infrarsi.dtypes import PRECISION_RANK, lowest_precision
from infrarsi.trial_record import TrialRecord


def _dtypes(records: Sequence[TrialRecord]) -> list[str]:
    return [d for r in records if r.metrics.witness for d in r.metrics.witness.get("matmul_dtypes") or ()]


def precision_change(*, baseline: Sequence[str], winner: Sequence[TrialRecord], policy: Sequence[str],
                     measured: Sequence[str]) -> str | None:
    """One sentence when the winner computes at a lower precision than the baseline (None: the same).

    ``baseline``: the dtypes the doctor's witnessed baseline ran its products in; ``winner``: its verification
    trials; ``policy``: the contract's ``[precision] allow``; ``measured``: the dtypes the doctor ran a
    calibration run in (its tolerances for them)."""
    seen = _dtypes(winner)
    if not seen or not baseline:
        return None
    before, after = lowest_precision(baseline), lowest_precision(seen)
    if PRECISION_RANK.get(after, 1) <= PRECISION_RANK.get(before, 1):
        return None
    why = "the contract's [precision] allow lists it" if after in policy else "a dtype knob of the contract offers it"
    held = (f"verification held it to the tolerances the doctor measured with a {after} baseline run"
            if after in measured else f"verification held it to assert_close's defaults for {after} (the doctor ran "
            "no baseline in it)")
    return (f"**Precision change:** the winner's matrix products run in {after} instead of the baseline's {before}: "
            f"another numeric result, which {why}; {held}.")
