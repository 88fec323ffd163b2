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
from bot.cli import apply, bank, doctor, init, journal, report, run
from infrarsi.errors import BAD_INPUT

__all__ = ["GROUPS", "Parser", "build_parser"]

# In the order of the stages: contract, baseline, trials, search, report, promotion; then the bank.
GROUPS = (init, doctor, journal, run, report, apply, bank)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors follow the one error model: one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="infrarsi", description=_bot_doc,
                    epilog="exit status: 0 done; 1 the thing checked is not right (a broken lock, a trial that "
                           "was not ok, a verdict that is not promoted, a promotion refused); 2 bad input (a "
                           "malformed or missing contract, an unknown flag, knob or run, no finished run); 3 a forge or API "
                           "failed in a way that may pass on retry (a 5xx, a dropped connection): retry later")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    return parser
