"""The error ``init`` raises when it must ask instead of guess (one line, what to pass)."""

from __future__ import annotations

from infrarsi.errors import BAD_INPUT, InfraRSIError


class DraftError(InfraRSIError, ValueError):
    """``init`` could not infer something it must not guess; the message says which flag to pass."""

    exit_code = BAD_INPUT
