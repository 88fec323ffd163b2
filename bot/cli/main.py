"""``infrarsi``: parse the command line (:mod:`bot.cli.registry`), run the verb, and the one error handler.

Exit status (:mod:`infrarsi.errors`): 0 success; 1 the thing checked is not
right (a broken lock, a trial that was not ``ok``, a baseline that cannot be
profiled, a promotion refused); 2 bad input (a malformed contract, a bad flag,
no finished run); 3 a forge or API failed in a way that may pass on retry. A
documented failure is an
:class:`~infrarsi.errors.InfraRSIError`: one line ``error: …`` on stderr, never
a traceback.
"""

from __future__ import annotations

import sys
from typing import Sequence

from bot.cli.common import UsageError
from bot.cli.registry import build_parser
from infrarsi.errors import InfraRSIError

__all__ = ["UsageError", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except InfraRSIError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
