"""The bot's commit identity and its trailer format, which git parses back."""

from __future__ import annotations

import pytest

from bot.workspace.identity import BOT_IDENTITY, BotIdentity, format_message


def test_the_default_identity() -> None:
    assert (BOT_IDENTITY.name, BOT_IDENTITY.email) == ("infrarsi-bot", "infrarsi-bot@users.noreply.local")
    assert BotIdentity(name="me", email="me@x") != BOT_IDENTITY
    with pytest.raises(AttributeError):
        BOT_IDENTITY.name = "other"  # type: ignore[misc]


def test_format_message_puts_trailers_after_a_blank_line() -> None:
    assert format_message("  trial 3\n", {"InfraRSI-Run": "r1", "Trial": " 3 "}) == \
        "trial 3\n\nInfraRSI-Run: r1\nTrial: 3\n"
    assert format_message("subject\n\nbody", {}) == "subject\n\nbody\n"


@pytest.mark.parametrize(("message", "trailers", "error"), [
    (" \n", {}, "a trial commit needs a non-empty message"),
    ("m", {"Bad Key": "v"}, "trailer key 'Bad Key' must be letters, digits and '-' only"),
    ("m", {"-x": "v"}, "trailer key '-x' must be"),
    ("m", {"K": "a\nb"}, "trailer 'K' needs a single-line, non-empty value"),
    ("m", {"K": "  "}, "trailer 'K' needs a single-line, non-empty value, got ''"),
])
def test_format_message_refuses_what_git_would_not_parse_back(message: str, trailers: dict, error: str) -> None:
    with pytest.raises(ValueError) as info:
        format_message(message, trailers)
    assert str(info.value).startswith(error)
