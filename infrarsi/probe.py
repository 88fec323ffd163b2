"""The probe: how a training script tells the bot that a step finished.

Stdlib only, and cheap to import, because it runs inside the candidate's
process. Each call writes one JSON line to the channel the bot handed over in
the environment (an inherited pipe descriptor, ``INFRARSI_PROBE_FD``, or a file,
``INFRARSI_PROBE_FILE``). Without a channel every call is a no-op, so a training
script that uses the probe still runs on its own.

The bot stamps each line with its own monotonic clock when it arrives; the
``t`` field written here is the child's clock and is only a cross-check.

Event kinds (the ``event`` field):

- ``step``: one optimizer step finished (``step``, ``loss``, ``tokens``);
- ``phase``: a phase of the current step ended (``name``, ``seconds``);
- ``memory``: a device memory reading (``peak_bytes``, ``device``);
- ``oom``: the job caught an out-of-memory error (``message``);
- ``info``: facts about the job, e.g. ``parameters`` (for MFU);
- anything else passed to :func:`event`.

Under torchrun every rank writes to the same channel (a FIFO): each event then
carries the process's ``rank``, and the bot takes steps from rank 0 only.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import Any, Iterator

FD_ENV = "INFRARSI_PROBE_FD"
FILE_ENV = "INFRARSI_PROBE_FILE"

# Bound once at import so that a candidate rebinding time.perf_counter later
# cannot change what the probe reports (the bot does not trust it anyway).
_clock = time.perf_counter


class _Channel:
    """Where events go; resolved lazily from the environment on first use."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._resolved = False

    def _resolve(self) -> None:
        self._resolved = True
        fd = os.environ.get(FD_ENV)
        if fd:
            self._fd = int(fd)
            return
        path = os.environ.get(FILE_ENV)
        if path:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        if not self._resolved:
            self._resolve()
        if self._fd is None:
            return
        line = (json.dumps(record, separators=(",", ":"), default=float) + "\n").encode()
        # One os.write per event: unbuffered, so the bot sees it the moment the
        # step ends, and atomic for lines under PIPE_BUF.
        os.write(self._fd, line)


_channel = _Channel()


def enabled() -> bool:
    """True when a bot is listening."""
    if not _channel._resolved:
        _channel._resolve()
    return _channel._fd is not None


def event(kind: str, **fields: Any) -> None:
    """Write one event of any kind (tagged with the process's ``RANK`` under torchrun)."""
    rank = os.environ.get("RANK")
    extra = {"rank": int(rank)} if rank is not None and rank.isdigit() else {}
    _channel.write({"event": kind, "t": _clock(), **extra, **fields})


def step(*, loss: float, tokens: int, step: int | None = None, **extra: Any) -> None:
    """Report that one optimizer step finished, with its loss and the tokens it consumed."""
    event("step", step=step, loss=float(loss), tokens=int(tokens), **extra)


def memory(*, peak_bytes: int, device: str = "cuda") -> None:
    """Report a device's peak memory (the bot samples host memory itself)."""
    event("memory", peak_bytes=int(peak_bytes), device=device)


def info(**facts: Any) -> None:
    """Report facts about the job (e.g. ``parameters=N`` for the 6·N·tokens FLOP estimate)."""
    event("info", **facts)


def oom(message: str) -> None:
    """Report an out-of-memory error the job caught before exiting."""
    event("oom", message=message[:2000])


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Mark a phase (data, forward, backward, optimizer, communication) of the current step."""
    start = _clock()
    try:
        yield
    finally:
        event("phase", name=name, seconds=_clock() - start)
