"""bot.stages.init.errors: ``init``'s ask-instead-of-guess error is a bad-input InfraRSI error and a ValueError."""
from __future__ import annotations

import pytest

from bot.stages.init.errors import DraftError
from infrarsi.errors import BAD_INPUT, InfraRSIError


def test_a_draft_error_is_bad_input_with_its_one_line_message() -> None:
    with pytest.raises(InfraRSIError) as caught:
        raise DraftError("pass --tokens-per-step")
    assert caught.value.exit_code == BAD_INPUT
    assert str(caught.value) == "pass --tokens-per-step"


def test_a_draft_error_is_caught_where_a_value_error_is() -> None:
    with pytest.raises(ValueError, match="--steps"):
        raise DraftError("cannot tell the training length: pass --steps")
