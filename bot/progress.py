"""A progress line on stderr for static analysis that can take minutes on a large repo.

Reading a repo of a few hundred files (libcst parses, the reach analysis, every
catalog codemod over the editable files) takes seconds to minutes; a command that
says nothing for two minutes looks hung. A :class:`Ticker` stays silent for the
first five seconds (small repos print nothing) and then says how far it is,
at most every few seconds.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO


@dataclass(kw_only=True)
class Ticker:
    """Counts work items and prints ``label: done/total what (N s)`` on ``stream`` when the work is slow."""

    label: str
    quiet_s: float = 5.0  # nothing is printed before this much time has passed
    every_s: float = 5.0  # then at most one line per this many seconds
    stream: TextIO | None = None  # default: sys.stderr at the time of printing
    _started: float = field(default_factory=time.perf_counter)
    _last: float = 0.0
    _spoke: bool = False

    def tick(self, done: int, total: int, what: str = "") -> None:
        now = time.perf_counter()
        elapsed = now - self._started
        if elapsed < self.quiet_s or (self._spoke and now - self._last < self.every_s):
            return
        self._last, self._spoke = now, True
        detail = f" {what}" if what else ""
        print(f"{self.label}: {done}/{total}{detail} ({elapsed:.0f} s)", file=self.stream or sys.stderr, flush=True)

    def done(self, summary: str) -> None:
        """A closing line, only when progress was shown (the reader saw it start)."""
        if self._spoke:
            elapsed = time.perf_counter() - self._started
            print(f"{self.label}: {summary} ({elapsed:.0f} s)", file=self.stream or sys.stderr, flush=True)
