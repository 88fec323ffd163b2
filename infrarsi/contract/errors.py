"""The one error a malformed contract raises: it names the file, the key and what was expected."""

from __future__ import annotations

from infrarsi.errors import BAD_INPUT, InfraRSIError


class ContractError(InfraRSIError):
    """A contract that cannot be used as written.

    ``str(error)`` is the whole message a user sees (the CLI prints it without a
    traceback): ``<file>: <key>: <what was expected>``.
    """

    exit_code = BAD_INPUT

    def __init__(self, file: str, key: str, message: str) -> None:
        self.file = file
        self.key = key
        self.message = message
        super().__init__(f"{file}: {key}: {message}" if key else f"{file}: {message}")
