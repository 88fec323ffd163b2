"""Strict reading of TOML tables: every key known, every value of the expected type.

Each accessor names the full dotted key in its error, so a user with a
malformed contract learns exactly which line to fix.
"""

from __future__ import annotations

import difflib
from typing import Any

from infrarsi.contract.errors import ContractError

_MISSING = object()


def describe(value: Any) -> str:
    """A value as the user wrote it, with its TOML type."""
    kind = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}.get(
        type(value), type(value).__name__
    )
    return f"{kind} {value!r}" if not isinstance(value, dict | list) else kind


class Table:
    """A TOML table being read; ``finish()`` rejects any key nobody asked for."""

    def __init__(self, data: Any, *, file: str, key: str) -> None:
        if not isinstance(data, dict):
            raise ContractError(file, key, f"expected a table, got {describe(data)}")
        self.data = data
        self.file = file
        self.key = key
        self._seen: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self.key}.{key}" if self.key else key

    def error(self, key: str, message: str) -> ContractError:
        return ContractError(self.file, self.path(key), message)

    def raw(self, key: str, default: Any = _MISSING, *, expected: str = "a value") -> Any:
        self._seen.add(key)
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            raise self.error(key, f"missing; expected {expected}")
        return default

    def has(self, key: str) -> bool:
        return key in self.data

    def table(self, key: str, *, required: bool = False) -> Table:
        value = self.raw(key, _MISSING if required else {}, expected="a table")
        return Table(value, file=self.file, key=self.path(key))

    def string(self, key: str, default: Any = _MISSING, *, choices: tuple[str, ...] | None = None) -> Any:
        expected = "a string" if choices is None else "one of " + ", ".join(repr(c) for c in choices)
        value = self.raw(key, default, expected=expected)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str) or (choices is not None and value not in choices):
            raise self.error(key, f"expected {expected}, got {describe(value)}")
        if choices is None and not value.strip():
            raise self.error(key, "expected a non-empty string")
        return value

    def boolean(self, key: str, default: Any = _MISSING) -> Any:
        value = self.raw(key, default, expected="true or false")
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {describe(value)}")
        return value

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int | None = None) -> Any:
        expected = "an integer" if minimum is None else f"an integer >= {minimum}"
        value = self.raw(key, default, expected=expected)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            raise self.error(key, f"expected {expected}, got {describe(value)}")
        return value

    def number(self, key: str, default: Any = _MISSING, *, positive: bool = True) -> Any:
        expected = "a positive number" if positive else "a number"
        value = self.raw(key, default, expected=expected)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or (positive and not value > 0):
            raise self.error(key, f"expected {expected}, got {describe(value)}")
        return float(value)

    def strings(self, key: str, default: Any = _MISSING) -> Any:
        value = self.raw(key, default, expected="an array of strings")
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected an array of strings, got {describe(value)}")
        return tuple(value)

    def finish(self) -> None:
        """Reject unknown keys, suggesting the closest known one."""
        for key in self.data:
            if key not in self._seen:
                close = difflib.get_close_matches(key, sorted(self._seen), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                known = ", ".join(sorted(self._seen))
                raise self.error(key, f"unknown key{hint}; known keys here: {known}")
