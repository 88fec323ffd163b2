"""How long the job trains, as its settings say, and the warm-up and measured step lines drafted from it.

A job configured for days is measured over a few step lines and then ended by the
bot. A steps setting of ``-1``, ``0``, ``None`` or ``inf`` (karpathy/makemore's
``--max-steps -1``, "-1 for infinite"; minGPT's ``max_iters = None``; nanochat's
``--num-iterations -1``) names no step count: the job trains until stopped (or for
a length it computes), so it is read as forever, never as a count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.stages.init.contract_draft import ContractDraft
from bot.stages.init.classify import current
from bot.stages.init.errors import DraftError

if TYPE_CHECKING:
    from bot.stages.init.setting import Setting
    from infrarsi.seams.proposer import ArgFlag

MAX_MEASURED = 12  # a job configured for days is measured over this many step lines, then ended
DEFAULT_MEASURED = 6
_STEPS = re.compile(r"^(steps|max_steps|iters|max_iters|num_steps|train_steps|total_steps|num_iterations|"
                    r"max_iterations|train_iters|num_batches|num_train_steps|training_steps)$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Length:
    """The steps setting and what it holds: a positive count, or ``steps=None`` for forever."""

    setting: str  # "--max-steps", "trainer.max_iters"
    raw: Any  # the value as read: 5000, -1, None, inf
    steps: int | None  # None: no count (forever)


def _count(value: Any) -> tuple[bool, int | None]:
    """(is a steps value, its positive count or None for forever)."""
    if value is None:
        return True, None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False, None
    if math.isnan(value) or math.isinf(value) or value <= 0:
        return True, None
    return True, int(value)


def read_length(flags: tuple[ArgFlag, ...], values: dict[str, Any], settings: list[Setting],
                given: dict[str, str]) -> Length | None:
    """The job's training length from its argparse flags (``values`` by dest), else any other setting."""
    for f in flags:
        if _STEPS.match(f.dest) and (f.has_default or f.flag in given):
            ok, steps = _count(values.get(f.dest))
            if ok:
                return Length(setting=f.flag, raw=values.get(f.dest), steps=steps)
    for s in settings:
        if _STEPS.match(s.leaf) and (s.has_default or s.token in given):
            ok, steps = _count(current(s, given))
            if ok:
                return Length(setting=s.token, raw=current(s, given), steps=steps)
    return None


def set_length(draft: ContractDraft, length: Length | None, *, per_line: int, unit: str = "step lines") -> None:
    """``timing.warmup_steps`` and ``timing.measured_steps`` (in step lines of ``per_line`` optimizer steps; ``unit``
    names the events: "optimizer steps" for the bot's own step clock)."""
    if length is None:
        draft.set("timing.warmup_steps", 2, "default: no steps setting found")
        draft.set("timing.measured_steps", DEFAULT_MEASURED, "default: no steps setting found; make sure the job runs "
                  f"this many {unit} after the warm-up (`infrarsi check --run` says)")
        return
    if length.steps is None:
        draft.set("timing.warmup_steps", 2, f"guessed: the first 2 {unit} are warm-up; {length.setting} is "
                  f"{length.raw!r}: no step count, read as training until stopped")
        draft.set("timing.measured_steps", MAX_MEASURED, f"guessed: the next {MAX_MEASURED} {unit}; the job "
                  "trains until stopped, so the bot ends it after them")
        return
    lines = length.steps // per_line
    if lines < 3:
        raise DraftError(f"{length.setting} = {length.raw!r} gives {lines} step line(s) ({per_line} step(s) a line); "
                         "a trial needs at least 3 (1 warm-up, 2 measured): give a larger "
                         f"{length.setting} in --command (the bot ends the job after the lines it measures)")
    warmup = max(1, min(2, lines // 4))
    measured = min(lines - warmup, MAX_MEASURED)
    draft.set("timing.warmup_steps", warmup, f"guessed: the first {warmup} of {lines} {unit} are warm-up")
    draft.set("timing.measured_steps", measured,
              f"guessed: the next {measured} {unit} of {length.setting} ({length.steps}); the bot ends the job "
              "after them" if measured < lines - warmup else f"guessed: the remaining steps of {length.setting}")
