"""The parser registry: one module per verb group, each with ``register(subparsers)``.

To add a verb, add it to its group's ``register`` (or a new group module to
:data:`GROUPS`); the pinned surface (``tests/cli_surface.json``) then changes on
purpose. Every parser is a :class:`Parser`, whose usage errors are one line,
``error: …``, and exit status 2 like every other bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from bot import __doc__ as _bot_doc
from bot.cli import apply, bank, doctor, env, init, journal, report, run
from bot.cli.common import infrarsi_version
from bot.cli.verbosity import add_verbosity_arguments
from infrarsi.errors import BAD_INPUT, EXIT_STATUS_HELP

__all__ = ["GROUPS", "Parser", "build_parser"]

# In the order of the stages: contract, baseline, trials, search, report, promotion; then the bank; then `env`.
GROUPS = (init, doctor, journal, run, report, apply, bank, env)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors follow the one error model: one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(BAD_INPUT)


def _verbs(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every verb's parser under ``parser``, nested ones (``bank list``) included."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb in action.choices.values():
                found += [verb, *_verbs(verb)]
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="infrarsi", description=_bot_doc, epilog=EXIT_STATUS_HELP)
    parser.add_argument("--version", action="version", version=f"infrarsi {infrarsi_version()}")
    add_verbosity_arguments(parser, top=True)
    sub = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    for verb in _verbs(parser):
        add_verbosity_arguments(verb)
    return parser
