"""The one error model: every documented failure is an :class:`InfraRSIError` that carries its exit status.

The ``infrarsi`` command line has one handler (``bot.cli.main.main``) that
prints ``error: <message>`` on one line and exits with the class's
``exit_code``; so a message must say, in one line, what is wrong and what to do.
A failure that is not an ``InfraRSIError`` is a bug and keeps its traceback.

Exit status:

- ``0`` done;
- ``1`` (:data:`NOT_RIGHT`) the thing checked is not right: a broken lock, a
  trial that was not ``ok``, a baseline that cannot be profiled, a verdict that
  is not ``promoted``, a promotion refused;
- ``2`` (:data:`BAD_INPUT`) bad input or setup: a malformed or missing
  contract, an unknown flag, knob or run, no finished run to report, a missing
  directory, a forge that refuses the token or has no such pull request;
- ``3`` (:data:`TRANSIENT`) a forge or API failed in a way that may pass on
  retry (a 5xx, a dropped connection, after the client's own retries): retry
  later. A workflow reruns the job on 3 and fixes its input on 2;
- ``4`` (:data:`NOT_YET`) not done yet, nothing wrong: ``promote`` re-created the
  promotion commit on a base that moved and waits for an approval of the new
  head (run it again once approved).

A verb that returns a status says so in its ``--help``; :data:`EXIT_STATUS_HELP` is
the table ``infrarsi --help`` ends with. A run cut short by a closed stdout (``infrarsi
gc | head``) ends quietly with 141, as a tool killed by SIGPIPE does.

Subclasses may also derive from a builtin (``ValueError``, ``KeyError``...) so
that callers catching those keep working.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["BAD_INPUT", "EXIT_STATUS_HELP", "NOT_RIGHT", "NOT_YET", "TRANSIENT", "InfraRSIError"]

NOT_RIGHT = 1
BAD_INPUT = 2
TRANSIENT = 3
NOT_YET = 4

EXIT_STATUS_HELP = ("exit status: 0 done; 1 the thing checked is not right (a broken lock, a trial that was not ok, a "
                    "verdict that is not promoted, a promotion refused); 2 bad input (a malformed or missing "
                    "contract, an unknown flag, knob or run, a number out of its range, no finished run); 3 a forge "
                    "or API failed in a way that may pass on retry (a 5xx, a dropped connection): retry later; 4 not "
                    "done yet (promote: waiting for an approval of the re-created commit)")


class InfraRSIError(Exception):
    """Base of every documented failure; ``exit_code`` is the status the CLI exits with (see the module doc)."""

    exit_code: ClassVar[int] = NOT_RIGHT

    # The message as raised, also for subclasses of KeyError (whose own __str__ would quote it).
    __str__ = Exception.__str__
