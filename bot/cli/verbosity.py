"""``-v`` and ``-q`` on every verb, as ``accelerate``, ``huggingface-cli`` and ``torchrun`` spell them.

``-v`` (``--verbose``) adds debug lines on stderr (``debug: <module>: …``, from :mod:`logging`): the argv and
working directory of every trial launched, the executor chosen, the worktrees made. ``-q`` (``--quiet``)
leaves only the ``error: …`` line on stderr: progress, notes and warnings are dropped; what a verb prints on
stdout (its result) is unchanged. Both may come before or after the verb (``infrarsi -q run`` or ``infrarsi
run -q``).
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["ErrorsOnly", "add_verbosity_arguments", "verbosity"]

_LOGGER = "bot"  # the product's loggers are named after their modules: bot.*, infrarsi.*


def add_verbosity_arguments(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``-v/--verbose`` and ``-q/--quiet``; on a verb they are SUPPRESSed by default, so that a flag given before
    the verb (on the top parser, ``top``) is not reset by the verb's default."""
    default_v, default_q = (0, False) if top else (argparse.SUPPRESS, argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="count", default=default_v,
                   help="also print debug lines on stderr (the argv of every trial, the executor, the worktrees)")
    p.add_argument("-q", "--quiet", action="store_true", default=default_q,
                   help="print nothing on stderr but an error line; the result on stdout is unchanged")


class ErrorsOnly(io.TextIOBase):
    """A text stream that passes on only the lines of ``target`` that start with ``error:``."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self._target = target
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if line.startswith("error:"):
                self._target.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending.startswith("error:"):
            self._target.write(self._pending)
            self._pending = ""
        self._target.flush()


@contextmanager
def verbosity(args: argparse.Namespace) -> Iterator[None]:
    """Inside the block, stderr and logging follow ``-v``/``-q`` of ``args``; restored after."""
    verbose, quiet = getattr(args, "verbose", 0) or 0, bool(getattr(args, "quiet", False))
    handler: logging.Handler | None = None
    loggers = [logging.getLogger(name) for name in (_LOGGER, "infrarsi")]
    levels = [lg.level for lg in loggers]
    stderr = sys.stderr
    if verbose and not quiet:
        handler = logging.StreamHandler(stderr)
        handler.setFormatter(logging.Formatter("debug: %(name)s: %(message)s"))
        for lg in loggers:
            lg.addHandler(handler)
            lg.setLevel(logging.DEBUG)
    if quiet:
        sys.stderr = ErrorsOnly(stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        if quiet:
            sys.stderr.flush()
            sys.stderr = stderr
        if handler is not None:
            for lg, level in zip(loggers, levels):
                lg.removeHandler(handler)
                lg.setLevel(level)
