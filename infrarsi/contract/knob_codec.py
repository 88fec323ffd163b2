"""One codec for a knob value: how it is written on the command line, in TOML, in JSON, as a Python literal.

Every stage that turns a knob value into text, or text back into a value, goes
through here, so the value a trial passes, the default a promotion writes into
the contract and the entry script, and the name the search gives the feature
cannot drift apart. :class:`KnobCodec` is bound to one knob (it knows the kind,
the domain and how booleans are spelled for the job); the module functions are
for the places that have a value but no knob yet (``init`` reading a command
line or an ``add_argument`` default, a candidate describing itself).

A decoder raises :class:`KnobValueError` with one line saying what was expected.
"""

from __future__ import annotations

import ast
import json
import math
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from infrarsi.contract.knob_domain import DEFAULT_BOOL_TEXT, KnobDomain, KnobValue
from infrarsi.errors import BAD_INPUT, InfraRSIError

__all__ = ["DEFAULT_BOOL_TEXT", "KnobCodec", "KnobValueError"]  # and the value functions below

#: Spellings ``--knob name=VALUE`` accepts for a bool knob, whatever the job's spelling is.
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
#: Characters a Hydra override value may hold unquoted (its grammar's primitive, minus what starts a sweep).
_HYDRA_PLAIN = re.compile(r"^[A-Za-z0-9_.:/\-+*%@$]+$")


class KnobValueError(InfraRSIError, ValueError):
    """A text or a value that is not one of the knob's values; the message says what was expected."""

    exit_code = BAD_INPUT


# -- without a knob: the value's own text ------------------------------------------------------------


def value_text(value: KnobValue) -> str:
    """The value as people read it (reports, candidate descriptions, feature names): ``bf16``, ``4``, ``True``."""
    return str(value)


def assignment_text(name: str, value: KnobValue) -> str:
    """``name=value``: one knob of a candidate, and the one-hot feature of that level."""
    return f"{name}={value_text(value)}"


def guess_value(text: str) -> int | float | str:
    """A command-line value whose knob is not known yet (``init``): an integer, else a number, else the text."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


#: Infinity as training scripts write it (``float('inf')``, ``math.inf``): a "forever" default, read as a value.
INFINITY = re.compile(r"""^\s*-?\s*(float\(\s*['"](inf|infinity)['"]\s*\)|(math|np|numpy|torch)\.inf)\s*$""", re.I)


def python_literal(code: str) -> tuple[bool, Any]:
    """The value of a Python literal expression as written in source (numbers, strings, lists, negatives,
    infinity).

    Returns ``(False, None)`` when ``code`` is not a literal (a name, a call): the
    user's code is read, never run.
    """
    if INFINITY.match(code):
        return True, -math.inf if code.strip().startswith("-") else math.inf
    try:
        return True, ast.literal_eval(code)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def toml_text(value: Any) -> str:
    """A TOML literal for ``value`` (what a contract's ``default = …`` holds)."""
    import tomlkit

    if isinstance(value, float) and not math.isfinite(value):
        raise KnobValueError(f"cannot write {value} to a contract")
    return tomlkit.item(value).as_string()


def python_text(value: KnobValue, *, quote: str = '"', bool_as_int: bool = False) -> str:
    """A Python literal for ``value``, as a promotion writes it into ``add_argument(..., default=…)``.

    ``quote`` keeps the quote style of the literal it replaces; ``bool_as_int``
    writes a bool as ``1``/``0`` where the script's flag is an int (``choices=[0, 1]``).
    """
    if isinstance(value, bool):
        return str(int(value)) if bool_as_int else repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise KnobValueError(f"cannot write {value} as a Python literal")
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if quote not in ('"', "'") or quote in text or "\\" in text or not text.isprintable():
        return repr(text)
    return f"{quote}{text}{quote}"


def hydra_text(text: str) -> str:
    """A value as a Hydra override writes it: plain when its grammar allows, else single-quoted."""
    if text and _HYDRA_PLAIN.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- bound to a knob ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KnobCodec:
    """How one knob's values are written and read in each format the project uses."""

    knob: KnobDomain

    # the command line and the environment: the text the job parses
    def to_cli(self, value: KnobValue) -> str:
        """The value as the job receives it after the flag, in ``--flag=``, an override or a variable."""
        if isinstance(value, bool):
            true, false = self.knob.bool_text
            return true if value else false
        return value_text(value)

    def from_cli(self, text: str) -> KnobValue:
        """A ``--knob name=VALUE`` text (or the job's own spelling of it) as a value of this knob."""
        knob = self.knob
        value: KnobValue
        try:
            if knob.kind == "bool":
                if text in knob.bool_text:
                    value = text == knob.bool_text[0]
                elif text.lower() in _TRUE | _FALSE:
                    value = text.lower() in _TRUE
                else:
                    raise ValueError(text)
            elif knob.kind == "int":
                value = int(text)
            elif knob.kind == "float":
                value = float(text)
            else:
                matches = [v for v in knob.values or () if self.to_cli(v) == text]
                value = matches[0] if matches else text
        except ValueError:
            raise KnobValueError(f"knob {knob.name}: expected {knob.domain_text()}, got {text!r}") from None
        return self.check(value, shown=repr(text))

    # TOML: the contract's default, a promotion's rewrite
    def to_toml(self, value: KnobValue) -> str:
        return toml_text(self.check(value))

    def from_toml(self, text: str) -> KnobValue:
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            raise KnobValueError(f"knob {self.knob.name}: expected a TOML value, got {text!r}") from None
        return self.from_json(value)

    # JSON: the journal, run.json, report.json
    def to_json(self, value: KnobValue) -> str:
        return json.dumps(self.check(value), allow_nan=False)

    def from_json(self, data: Any) -> KnobValue:
        """A decoded JSON (or TOML) value; a whole float is accepted for a float knob written as an integer."""
        if isinstance(data, str) and self.knob.kind != "categorical":
            raise KnobValueError(f"knob {self.knob.name}: expected {self.knob.domain_text()}, got {data!r}")
        if self.knob.kind == "float" and isinstance(data, int) and not isinstance(data, bool):
            data = float(data)
        return self.check(data)

    # Python: argparse defaults in the entry script
    def to_python(self, value: KnobValue, *, quote: str = '"', bool_as_int: bool = False) -> str:
        return python_text(self.check(value), quote=quote, bool_as_int=bool_as_int)

    def from_python(self, code: str) -> KnobValue:
        ok, value = python_literal(code)
        if not ok:
            raise KnobValueError(f"knob {self.knob.name}: expected a Python literal, got {code!r}")
        if self.knob.kind == "bool" and type(value) is int and value in (0, 1):
            value = bool(value)  # an int-typed flag (choices=[0, 1]) holds a bool knob as 0/1
        return self.from_json(value)

    # the search space
    def feature(self, value: KnobValue) -> str:
        """The one-hot feature of this level: ``dtype=bf16`` (priors and the bank are keyed by it)."""
        return assignment_text(self.knob.name, value)

    def check(self, value: Any, *, shown: str | None = None) -> KnobValue:
        """``value`` itself when it is one of the knob's values, of the knob's type; else KnobValueError."""
        wrong_type = self.knob.kind == "int" and (isinstance(value, bool) or not isinstance(value, int))
        if wrong_type or not self.knob.contains(value):
            raise KnobValueError(f"knob {self.knob.name}: expected {self.knob.domain_text()}, "
                                 f"got {shown or repr(value)}")
        return value
