"""The one error model: exit statuses the CLI exits with, and messages as raised."""

from __future__ import annotations

import pytest

from infrarsi.errors import BAD_INPUT, NOT_RIGHT, TRANSIENT, InfraRSIError


def test_exit_statuses() -> None:
    assert (NOT_RIGHT, BAD_INPUT, TRANSIENT) == (1, 2, 3)
    assert InfraRSIError.exit_code == NOT_RIGHT
    assert InfraRSIError("x").exit_code == NOT_RIGHT


def test_a_subclass_sets_its_status_and_may_also_be_a_builtin() -> None:
    class Missing(InfraRSIError, KeyError):
        exit_code = BAD_INPUT

    with pytest.raises(KeyError) as info:
        raise Missing("no run 'r1'")
    assert info.value.exit_code == BAD_INPUT
    assert str(info.value) == "no run 'r1'"  # not KeyError's quoted "\"no run 'r1'\""
    assert str(KeyError("no run 'r1'")) != str(info.value)
