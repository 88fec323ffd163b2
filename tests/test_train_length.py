"""bot.stages.init.train_length: the steps setting read as a count or as forever, and the step lines drafted."""
from __future__ import annotations

import math

import pytest

from bot.stages.init.draft import ContractDraft
from bot.stages.init.errors import DraftError
from bot.stages.init.setting import Setting
from bot.stages.init.train_length import MAX_MEASURED, Length, read_length, set_length
from infrarsi.seams.proposer import ArgFlag


def _flag(dest: str, default: object) -> ArgFlag:
    return ArgFlag(flag=f"--{dest.replace('_', '-')}", dest=dest, default=default, has_default=True)


@pytest.mark.parametrize("raw", [-1, 0, None, math.inf, float("nan")])
def test_a_forever_value_has_no_count(raw: object) -> None:
    length = read_length((_flag("max_steps", raw),), {"max_steps": raw}, [], {})
    assert length is not None
    assert (length.setting, length.steps) == ("--max-steps", None)


def test_a_count_is_read_from_the_flag_else_from_another_setting() -> None:
    assert read_length((_flag("max_iters", 5000),), {"max_iters": 5000.0}, [], {}) == Length(
        setting="--max-iters", raw=5000.0, steps=5000)
    s = Setting(key="trainer.max_iters", convention="hydra", passing="hydra", token="trainer.max_iters",
                default=100, has_default=True)
    assert read_length((), {}, [s], {"trainer.max_iters": "40"}) == Length(setting="trainer.max_iters", raw=40,
                                                                          steps=40)


def test_a_non_numeric_or_unnamed_setting_is_no_length() -> None:
    assert read_length((_flag("steps", "many"),), {"steps": "many"}, [], {}) is None
    assert read_length((_flag("lr", 3),), {"lr": 3}, [], {}) is None
    assert read_length((ArgFlag(flag="--steps", dest="steps"),), {"steps": None}, [], {}) is None  # no default


def _timing(length: Length | None, per_line: int = 1) -> dict[str, int]:
    d = ContractDraft()
    set_length(d, length, per_line=per_line)
    return d.data["timing"]


def test_the_step_lines_are_drafted_from_the_count() -> None:
    assert _timing(Length(setting="--steps", raw=100, steps=100)) == {"warmup_steps": 2, "measured_steps": MAX_MEASURED}
    assert _timing(Length(setting="--steps", raw=5, steps=5)) == {"warmup_steps": 1, "measured_steps": 4}
    assert _timing(Length(setting="--steps", raw=100, steps=100), per_line=10) == {"warmup_steps": 2,
                                                                                    "measured_steps": 8}
    assert _timing(None) == {"warmup_steps": 2, "measured_steps": 6}
    assert _timing(Length(setting="--steps", raw=-1, steps=None)) == {"warmup_steps": 2, "measured_steps": MAX_MEASURED}


def test_too_few_step_lines_ask_for_a_larger_count() -> None:
    with pytest.raises(DraftError, match=r"^--steps = 20 gives 2 step line\(s\) \(10 step\(s\) a line\); a trial "
                                         r"needs at least 3 .*give a larger --steps in --command"):
        _timing(Length(setting="--steps", raw=20, steps=20), per_line=10)
