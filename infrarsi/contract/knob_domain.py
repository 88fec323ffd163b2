"""What a knob's values are: its name, kind and domain, the part of a knob both its codec and the contract need.

:class:`infrarsi.contract.model.Knob` is a :class:`KnobDomain` plus how the value
reaches the job (flag, variable, override); :class:`infrarsi.contract.knob_codec.KnobCodec`
writes and reads values of a domain. Both import this module, neither the other
(a codec of a knob, a knob with its codec: no import cycle, tests/test_layout_rules.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT_BOOL_TEXT", "KnobDomain", "KnobKind", "KnobValue", "same_value"]

KnobValue = str | int | float | bool
KnobKind = Literal["categorical", "int", "float", "bool"]

#: How a boolean is spelled when it is passed with a value, unless the knob says otherwise.
DEFAULT_BOOL_TEXT: tuple[str, str] = ("1", "0")


def same_value(a: KnobValue, b: KnobValue) -> bool:
    """Equal and of the same kind: ``True == 1`` in Python, but a knob domain must not confuse them."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


@dataclass(frozen=True, kw_only=True, slots=True)
class KnobDomain:
    """A knob's name and the values it may take: ``values`` (categorical, or an explicit list), else the range
    ``low``..``high`` (``log``: searched on a log scale); a bool knob is spelled ``bool_text`` (true, false)."""

    name: str
    kind: KnobKind
    default: KnobValue
    values: tuple[KnobValue, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    bool_text: tuple[str, str] = DEFAULT_BOOL_TEXT

    def contains(self, value: KnobValue) -> bool:
        """Whether ``value`` is inside this knob's domain."""
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.values is not None:
            return any(same_value(value, v) for v in self.values)
        if self.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            return False
        if self.kind == "float" and (isinstance(value, bool) or not isinstance(value, int | float)):
            return False
        assert self.low is not None and self.high is not None
        return self.low <= float(value) <= self.high and math.isfinite(float(value))

    def domain_text(self) -> str:
        """The domain as a user would write it, for error messages."""
        if self.kind == "bool":
            return "true or false"
        if self.values is not None:
            return "one of " + ", ".join(repr(v) for v in self.values)
        return f"{'a number' if self.kind == 'float' else 'an integer'} in [{self.low:g}, {self.high:g}]"
