"""``infrarsi``: parse the command line (:mod:`bot.cli.registry`), run the verb, and the one error handler.

Exit status (:mod:`infrarsi.errors`): 0 success; 1 the thing checked is not
right (a broken lock, a trial that was not ``ok``, a baseline that cannot be
profiled, a promotion refused); 2 bad input (a malformed contract, a bad flag,
no finished run); 3 a forge or API failed in a way that may pass on retry; 4 not
done yet (``promote`` waits for an approval). A
documented failure is an :class:`~infrarsi.errors.InfraRSIError`: one line
``error: …`` on stderr, never a traceback. ``-v``/``-q`` (:mod:`bot.cli.verbosity`)
hold for the whole verb; a reader that closes stdout early (``| head``) ends it
quietly with 141, as SIGPIPE ends a tool.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from bot.cli.common import UsageError
from bot.cli.registry import build_parser
from bot.cli.verbosity import verbosity
from infrarsi.errors import InfraRSIError

__all__ = ["UsageError", "build_parser", "main"]

BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool whose reader went away


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "verbose", 0) and getattr(args, "quiet", False):
        parser.error("-v and -q: choose one (-v adds debug lines, -q leaves only errors)")
    try:
        with verbosity(args):
            return int(args.func(args))
    except InfraRSIError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail on the closed pipe too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout with no descriptor (captured in tests)
        pass


if __name__ == "__main__":
    sys.exit(main())
