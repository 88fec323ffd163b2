"""A look past the measured window: one pair of each verification runs on to a step the job cannot know.

The bot watches a few steps of a job configured to run for days, and the steps
it counts and compares are known to the job (the contract is in its
repository). A patch honest there and different after them — a schedule
rewritten after warm-up, biases frozen from some step on, a precision lowered
later — would pass every row measured inside the window. So the first pair of
each verification runs both arms a drawn number of step lines past the window,
witnessed, and the candidate is held to the baseline there: the optimizer's
settings at every step, each parameter's own update, the weights, and the loss
that reached backward() beyond the window. A job that ends with its window
(``--steps`` fixed to the measured steps) has nothing past it: every step it
runs was seen, which the row says.
"""

from __future__ import annotations

import random

from infrarsi.invariants import (FLOOR, InvariantCheck, WorkReference, compared, not_checked, param_deviations,
                                 tolerance, update_spread, vector_deviation, witnessed_report)
from infrarsi.dtypes import lowest_precision
from infrarsi.lever_rows import mask_mismatch
from infrarsi.trial_record import Outcome, TrialRecord
from infrarsi.witnessed_settings import optimizer_problems

#: The extra step lines a verification's first pair runs, drawn per verification from this many times the
#: measured window's lines (the job cannot know where it will be stopped).
EXTRA_LINES = (1.0, 2.0)
#: Relative tolerance on a loss past the window, where no band was calibrated: a floor, widened by what the
#: pair's own losses in the window already differ by.
LOSS_FLOOR = 1e-3
LOSS_MARGIN = 3.0


def draw_extra_lines(measured: int, rng: random.Random | None = None) -> int:
    """How many step lines past the measured window the first pair runs on (at least one)."""
    low, high = (max(1, round(measured * f)) for f in EXTRA_LINES)
    return (rng or random.SystemRandom()).randint(low, max(low, high))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def past_window_row(baseline: TrialRecord, candidate: TrialRecord, *, reference: WorkReference | None,
                    window_end: int, moved: tuple[str, ...] = (), resplit: bool = False) -> InvariantCheck:
    """The candidate's run past the window against the baseline's from the same pair. ``window_end``: the last
    optimizer step of the measured window; ``resplit``: the candidate splits the global batch otherwise (the
    pair's baseline runs the defaults' split)."""
    t = f"trial {candidate.trial_no} (past the window, against baseline trial {baseline.trial_no})"
    if baseline.outcome is not Outcome.OK or candidate.outcome is not Outcome.OK:
        return not_checked("past_window", f"{t}: a run of the pair did not end ok")
    base, mine = witnessed_report(baseline), witnessed_report(candidate)
    if base is None or mine is None:
        return not_checked("past_window", f"{t}: not witnessed")
    masks = mask_mismatch(mine, base)
    if masks is not None:
        return not_checked("past_window", f"{t}: {masks}")
    if base.optimizer_steps <= window_end:
        return compared("past_window", True, f"{t}: the job ends after optimizer step {base.optimizer_steps}, inside "
                        "the observed run: nothing past the window to compare")
    problems: list[str] = []
    if base.at == mine.at == "step" and mine.optimizer_steps != base.optimizer_steps:
        problems.append(f"{mine.optimizer_steps} optimizer steps, baseline {base.optimizer_steps}")
    if base.optimizer:
        problems += optimizer_problems(mine, base, impl_knob_moved="optimizer_impl" in moved)
    if resplit and any(p > 0 for p, *_ in (base.dropout or ())):
        # dropout's masks are drawn per micro-batch (one draw of the job's stream per site call), so a re-split
        # draws other masks from step 1 on and its numbers drift from the default split's baseline by as much
        # as two seeds would; inside the window it is held to a baseline run at its own split (split_reference)
        if problems:
            return compared("past_window", False, f"{t}: " + "; ".join(problems[:3]))
        return not_checked("past_window", f"{t}: the optimizer past the window is the baseline's; its numbers are "
                           "not compared: the candidate re-splits the global batch of a model with dropout, whose "
                           "masks are drawn per micro-batch (inside the window it is held to a baseline run at its "
                           "own split)")
    dtype = lowest_precision(mine.matmul_dtypes)
    # the baseline's own run-to-run spread counts as in the window's weights row: a job whose repeats differ
    # (unseeded data order) differs past the window by as much, baseline against baseline
    whole_spread, param_spread = update_spread(reference) if reference is not None else (0.0, 0.0)
    update_tol = max(tolerance(reference, dtype, "update"), FLOOR["update"], whole_spread) if reference is not None \
        else FLOOR["update"]
    dev = vector_deviation(mine.update_proj, [base.update_proj]) if len(mine.update_proj) == len(base.update_proj) \
        else float("inf")
    if not dev <= update_tol:
        problems.append(f"the weight update differs by {dev:.2e} relative (tolerance {update_tol:.1e})")
    per_param = param_deviations(mine, [base])
    param_tol = max(tolerance(reference, dtype, "param_update"), FLOOR["param_update"], param_spread) \
        if reference is not None else FLOOR["param_update"]
    if per_param and max(per_param) > param_tol:
        worst = max(range(len(per_param)), key=lambda i: per_param[i])
        problems.append(f"parameter {worst}'s own update is {per_param[worst]:.0%} off (tolerance {param_tol:.0%})")
    common = min(len(mine.backward_loss), len(base.backward_loss))
    inside = [(a, b) for a, b in zip(mine.backward_loss[:window_end], base.backward_loss[:window_end])
              if a is not None and b is not None]
    loss_tol = max(LOSS_FLOOR, LOSS_MARGIN * max((_rel(a, b) for a, b in inside), default=0.0))
    for step in range(window_end + 1, common + 1):
        a, b = mine.backward_loss[step - 1], base.backward_loss[step - 1]
        if (a is None) != (b is None):
            problems.append(f"optimizer step {step}: {'no' if a is None else 'a'} loss reached backward() "
                            f"(baseline: {'none' if b is None else 'one'})")
            break
        if a is not None and b is not None and _rel(a, b) > loss_tol:
            problems.append(f"optimizer step {step}: loss {a:.6g} vs the baseline's {b:.6g} ({_rel(a, b):.2e} > "
                            f"{loss_tol:.1e} relative)")
            break
    if problems:
        return compared("past_window", False, f"{t}: " + "; ".join(problems[:3]))
    return compared("past_window", True, f"{t}: to optimizer step {min(mine.optimizer_steps, base.optimizer_steps)} "
                    f"({common - window_end} past the window) the optimizer, each parameter's update, the weights "
                    "and the loss that reached backward() match the baseline's")
