"""Which clock times a job's steps: its printed lines, or the bot's own step clock (``timing.source = "optimizer"``).

A printed line is a clock only when it comes once per step, or once per few steps, and times nothing else. Many
jobs print their loss only with an evaluation: tutorial GPTs print ``step 500: train loss 2.30, val loss 2.33``
every ``eval_interval`` iterations after averaging ``eval_iters`` batches of each split; research code logs only
at eval. Timed by those lines, a trial would run thousands of steps and measure evaluations. Such a job — its step
line printed after an evaluation, or a loss printed only beside an evaluation's, or lines further apart than
:data:`SPARSE_LINES` optimizer steps that the command cannot make denser — is timed by the bot's own clock: one
event per optimizer step from the bot's code in the job's interpreter, and the job is ended after the measured
steps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bot.stages.init.classify import current
from bot.stages.init.setting import Setting
from bot.stages.init.steplines import EvalLine, StepLine

#: Printed lines further apart than this many optimizer steps are sparse: 2 warm-up and 12 measured of them would
#: be hundreds of steps a trial, and the job's own reporting between them (a running mean, an ETA) its time.
SPARSE_LINES = 10


def interval_setting(settings: Sequence[Setting], expression: str | None) -> Setting | None:
    """The setting an interval expression reads (``eval_interval``, ``args.log_interval``, ``cfg.VALIDATE_EVERY``):
    the one whose name is the expression's last identifier."""
    if not expression:
        return None
    names = re.findall(r"[A-Za-z_]\w*", expression)
    if not names:
        return None
    leaf = names[-1]
    for s in settings:
        if leaf in (s.key, s.token.lstrip("-").replace("-", "_")) or leaf.lower() == s.leaf:
            return s
    return None


def interval_value(settings: Sequence[Setting], given: dict[str, str], expression: str | None) -> int | None:
    """The value of the interval variable (the command's, else the code's default); None when unknown."""
    setting = interval_setting(settings, expression)
    value = current(setting, given) if setting is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def optimizer_clock_reason(step_line: StepLine | None, steps_per_line: int, eval_lines: Sequence[EvalLine],
                           settings: Sequence[Setting], given: dict[str, str]) -> str | None:
    """Why the printed lines cannot time the steps (then the bot's own clock does), or None when they can."""
    if step_line is not None:
        if step_line.evaluation:
            return (f"the step line (line {step_line.line}) is printed after an evaluation ({step_line.evaluation}()): "
                    "timed by its lines, a trial would time evaluations, not steps")
        if steps_per_line > SPARSE_LINES:
            return (f"the step line (line {step_line.line}) comes every {steps_per_line} optimizer steps"
                    + (f" ({step_line.interval})" if step_line.interval else "") + f", more than {SPARSE_LINES}: "
                    "a trial timed by its lines would run hundreds of steps")
        return None
    if not eval_lines:
        return None
    line = eval_lines[0]
    every = interval_value(settings, given, line.interval) or line.every
    cadence = (f" every {every} optimizer steps" + (f" ({line.interval})," if line.interval else ",")) \
        if every > 1 else ""
    return (f"the job prints its training loss only beside an evaluation's (line {line.line},{cadence} after "
            f"{line.evaluation}" + ("()" if line.evaluation.isidentifier() else "") + "): timed by its lines, a trial "
            "would run that many steps and time evaluations, not steps")
