"""Who the bot commits as, and how its commit messages carry their trailers: plain values, no repository.

Stages import these directly (the promotion commit's message, telling the bot's
commits from a human's); only :mod:`bot.workspace` turns an identity into a git
signature (:func:`bot.workspace.commits.signature`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["BOT_IDENTITY", "BotIdentity", "format_message"]

_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


@dataclass(frozen=True, kw_only=True, slots=True)
class BotIdentity:
    """Who authors and commits trial commits (both roles: the bot wrote the change)."""

    name: str = "infrarsi-bot"
    email: str = "infrarsi-bot@users.noreply.local"


BOT_IDENTITY = BotIdentity()


def format_message(message: str, trailers: Mapping[str, str]) -> str:
    """``message`` followed by a blank line and one ``Key: value`` line per trailer.

    Keys must be trailer tokens (letters, digits, '-'); values one non-empty
    line, so that ``git interpret-trailers`` and libgit2 parse them back.
    """
    body = message.strip()
    if not body:
        raise ValueError("a trial commit needs a non-empty message")
    lines = []
    for key, value in trailers.items():
        if not _TRAILER_KEY.fullmatch(key):
            raise ValueError(f"trailer key {key!r} must be letters, digits and '-' only")
        value = str(value).strip()
        if not value or "\n" in value or "\r" in value:
            raise ValueError(f"trailer {key!r} needs a single-line, non-empty value, got {value!r}")
        lines.append(f"{key}: {value}")
    if not lines:
        return body + "\n"
    return body + "\n\n" + "\n".join(lines) + "\n"
