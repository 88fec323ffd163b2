"""What every verb group shares: the bad-input error, the REPO argument, the run-id flag, progress lines, and the
argparse types that check every number and name before anything runs.

A number or a name is checked where it is parsed (:func:`int_at_least`, :func:`positive_float`,
:func:`run_id`), so a bad value is one line naming the flag, the value and the allowed range before a
contract is read or a trial starts.

One flag name per idea across verbs: a run is named by ``--run-id`` and a
repository by the positional ``REPO`` on every verb. The names these replaced
(``--run`` on ``report``/``apply``, ``--repo`` on ``approve``/``bank sync``) are
kept as hidden aliases that print a deprecation note, so existing scripts keep
working.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infrarsi.errors import BAD_INPUT, InfraRSIError

__all__ = ["UsageError", "add_deprecated_alias", "add_repo_argument", "add_run_id_argument", "fmt_bytes",
           "infrarsi_version", "int_at_least", "memory_size", "positive_float", "repo_dir", "resolve_repo", "run_id",
           "say"]


class UsageError(InfraRSIError):
    """Bad input on the command line: printed without a traceback, exit status 2."""

    exit_code = BAD_INPUT


class _DeprecatedAlias(argparse.Action):
    """Stores like the flag it stands for and says, once, on stderr, which flag to use instead."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, replacement: str, **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"note: {option_string} is deprecated; use {self.replacement}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= low``; anything else is one line naming the value and the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value
    parse.__name__ = f"int_at_least_{low}"
    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite number ``> 0`` (seconds, a budget)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def memory_size(text: str) -> int:
    """An argparse type: a memory size in bytes, written as bytes or with a unit (``6GiB``, ``512MB``)."""
    from infrarsi.contract.load import parse_memory

    value = parse_memory(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a size > 0 in bytes or like 6GiB or 512MB, got {text!r}")
    return value


def run_id(text: str) -> str:
    """An argparse type: a run id that can name a directory and a branch (``[A-Za-z0-9._-]+``, not starting with
    '.' or '-'; :func:`bot.workspace.naming.validate_run_id`)."""
    from bot.workspace.errors import InvalidRunIdError
    from bot.workspace.naming import validate_run_id

    try:
        return validate_run_id(text)
    except InvalidRunIdError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_deprecated_alias(p: argparse.ArgumentParser, old: str, *, dest: str, replacement: str,
                         type: Callable[[str], Any] | None = None) -> None:  # noqa: A002 - argparse's own name
    """``old`` still works (hidden from ``--help``) and stores into ``dest`` like ``replacement`` (checked by
    ``type`` like it)."""
    p.add_argument(old, dest=dest, action=_DeprecatedAlias, replacement=replacement, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS, type=type)


def add_repo_argument(p: argparse.ArgumentParser, *, optional: bool = False,
                      help: str = "the training repo") -> None:  # noqa: A002 - argparse's own name
    """The positional REPO every verb takes; ``optional`` verbs default to the current directory."""
    if optional:
        p.add_argument("repo", nargs="?", default=None, metavar="REPO",
                       help=f"{help} (default: the current directory)")
    else:
        p.add_argument("repo", metavar="REPO", help=help)


def add_run_id_argument(p: argparse.ArgumentParser, help: str, *,  # noqa: A002
                        deprecated_run: bool = False) -> None:
    """``--run-id ID``; ``deprecated_run`` keeps the old ``--run`` spelling of ``report`` and ``apply``."""
    p.add_argument("--run-id", metavar="ID", type=run_id, help=help)
    if deprecated_run:
        add_deprecated_alias(p, "--run", dest="run_id", replacement="--run-id", type=run_id)


def resolve_repo(args: argparse.Namespace) -> str:
    """REPO, else the deprecated ``--repo DIR`` (stored as ``repo_option``), else the current directory."""
    return args.repo or getattr(args, "repo_option", None) or "."


def repo_dir(path: str) -> Path:
    """REPO as an existing directory, or the one-line error that says so."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise UsageError(f"{path}: not a directory (REPO is the training repository)")
    return root


def infrarsi_version() -> str:
    """The installed package's version (``infrarsi --version``, ``infrarsi env``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("infrarsi")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**20:.0f} MiB"


def say(args: argparse.Namespace) -> Callable[[str], None]:
    """A progress printer on stderr, silent under ``--json``."""
    def _say(message: str) -> None:
        if not getattr(args, "json", False):
            print(f"  {message}", file=sys.stderr, flush=True)
    return _say
