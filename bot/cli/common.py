"""What every verb group shares: the bad-input error, the REPO argument, the run-id flag, progress lines.

One flag name per idea across verbs: a run is named by ``--run-id`` and a
repository by the positional ``REPO`` on every verb. The names these replaced
(``--run`` on ``report``/``apply``, ``--repo`` on ``approve``/``bank sync``) are
kept as hidden aliases that print a deprecation note, so existing scripts keep
working.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infrarsi.errors import BAD_INPUT, InfraRSIError

__all__ = ["UsageError", "add_deprecated_alias", "add_repo_argument", "add_run_id_argument", "fmt_bytes",
           "repo_dir", "resolve_repo", "say"]


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


def add_deprecated_alias(p: argparse.ArgumentParser, old: str, *, dest: str, replacement: str) -> None:
    """``old`` still works (hidden from ``--help``) and stores into ``dest`` like ``replacement``."""
    p.add_argument(old, dest=dest, action=_DeprecatedAlias, replacement=replacement, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)


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
    p.add_argument("--run-id", metavar="ID", help=help)
    if deprecated_run:
        add_deprecated_alias(p, "--run", dest="run_id", replacement="--run-id")


def resolve_repo(args: argparse.Namespace) -> str:
    """REPO, else the deprecated ``--repo DIR`` (stored as ``repo_option``), else the current directory."""
    return args.repo or getattr(args, "repo_option", None) or "."


def repo_dir(path: str) -> Path:
    """REPO as an existing directory, or the one-line error that says so."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise UsageError(f"{path}: not a directory (REPO is the training repository)")
    return root


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
