"""Read a trial's output as it arrives and stamp each step with the bot's clock.

One thread per stream; each line is stamped with ``time.perf_counter()`` of the
bot's process the moment it is read, so the candidate cannot influence the
stamp however it treats its own clocks. A carriage return ends a line too:
progress bars (tqdm, Lightning) rewrite one terminal line per step with ``\r``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from infrarsi.seams.executor import TrialSpec
from infrarsi.trial_record import StepEvent

Clock = Callable[[], float]
_LINE_END = re.compile(rb"\r\n|\r|\n")


class StepCollector:
    """Thread-safe accumulation of step events and side events (oom, device memory).

    ``source`` is the contract's: with ``"optimizer"`` the step events are the bot's own step clock's (the site
    payload's, marked ``by``), with ``"probe"`` the job's own (``infrarsi.probe.step``); the other kind is not a
    step of this trial."""

    def __init__(self, source: str = "probe") -> None:
        self.source = source
        self._lock = threading.Lock()
        self.steps: list[StepEvent] = []
        self.oom: str | None = None
        self.device_peak: int | None = None
        self._device_steady: dict[Any, int] = {}  # per rank, its latest reading (the least it held so far)
        self.device_capacity: int | None = None
        self.phases: list[tuple[int, str, float]] = []  # (step it belongs to, name, seconds)
        self.info: dict[str, Any] = {}

    @property
    def device_steady(self) -> int | None:
        """What the fullest rank held on its GPU across steps (the ranks' own least readings, the largest)."""
        with self._lock:
            return max(self._device_steady.values(), default=None)

    def add_step(self, event: StepEvent) -> None:
        with self._lock:
            self.steps.append(event)

    def update_last_loss(self, loss: float | None) -> None:
        """A progress bar repainted the last step with its own loss (the first paint shows the previous one)."""
        with self._lock:
            if self.steps and loss is not None:
                last = self.steps[-1]
                self.steps[-1] = StepEvent(step=last.step, stamp=last.stamp, loss=loss, tokens=last.tokens,
                                           child_t=last.child_t)

    def set_loss(self, step: int | None, loss: float | None) -> None:
        """The loss of step ``step`` (numbered as its event was), sent after its event."""
        with self._lock:
            for i in range(len(self.steps) - 1, -1, -1):
                e = self.steps[i]
                if e.step == step and loss is not None:
                    self.steps[i] = StepEvent(step=e.step, stamp=e.stamp, loss=loss, tokens=e.tokens,
                                              child_t=e.child_t)
                    return

    def add_probe(self, record: dict[str, Any], stamp: float) -> None:
        kind = record.get("event")
        if kind == "step" and (record.get("by") is not None) != (self.source == "optimizer"):
            return  # the other clock's step
        if kind == "step":
            self.add_step(StepEvent(step=_int(record.get("step")), stamp=stamp, loss=_float(record.get("loss")),
                                    tokens=_int(record.get("tokens")), child_t=_float(record.get("t"))))
        elif kind == "loss":  # the step clock's loss of an earlier step, once its copy off the GPU was done
            self.set_loss(_int(record.get("step")), _float(record.get("loss")))
        elif kind == "oom":
            with self._lock:
                self.oom = str(record.get("message", "out of memory"))
        elif kind == "memory":
            peak, steady, capacity = (_int(record.get(k)) for k in ("peak_bytes", "steady_bytes", "capacity_bytes"))
            with self._lock:
                if peak is not None:
                    self.device_peak = max(peak, self.device_peak or 0)
                if steady:
                    self._device_steady[record.get("rank")] = steady
                if capacity:  # the tightest device of any rank
                    self.device_capacity = min(capacity, self.device_capacity or capacity)
        elif kind == "phase":
            seconds = _float(record.get("seconds"))
            if seconds is not None:
                with self._lock:  # a phase belongs to the step whose event has not arrived yet
                    self.phases.append((len(self.steps) + 1, str(record.get("name")), seconds))
        elif kind == "info":
            with self._lock:
                self.info.update({k: v for k, v in record.items() if k not in ("event", "t")})


def _int(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


class LineReader(threading.Thread):
    """Reads one stream line by line, stamps each line, hands it to ``on_line``; keeps a tail."""

    def __init__(self, stream: IO[bytes], on_line: Callable[[str, float], None], *, clock: Clock = time.perf_counter,
                 log_path: Path | None = None, tail_lines: int = 40) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.on_line = on_line
        self.clock = clock
        self.log_path = log_path
        self.tail: deque[str] = deque(maxlen=tail_lines)

    def run(self) -> None:
        log = open(self.log_path, "ab") if self.log_path else None
        read = getattr(self.stream, "read1", None) or self.stream.readline
        pending = b""
        try:
            for chunk in iter(lambda: read(65536), b""):
                stamp = self.clock()
                if log:
                    log.write(chunk)
                *lines, pending = _LINE_END.split(pending + chunk)
                for raw in lines:
                    self._line(raw, stamp)
            if pending:
                self._line(pending, self.clock())
        except (OSError, ValueError):
            pass
        finally:
            if log:
                log.close()

    def _line(self, raw: bytes, stamp: float) -> None:
        line = raw.decode("utf-8", "replace")
        if line.strip():
            self.tail.append(line)
            self.on_line(line, stamp)

    def tail_text(self, max_chars: int = 4000) -> str:
        return "\n".join(self.tail)[-max_chars:]


def probe_handler(collector: StepCollector) -> Callable[[str, float], None]:
    def handle(line: str, stamp: float) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return  # a torn or foreign line is not an event
        if isinstance(record, dict):
            collector.add_probe(record, stamp)
    return handle


def regex_handler(collector: StepCollector, pattern: str) -> Callable[[str, float], None]:
    regex = re.compile(pattern)
    last: list[Any] = [None]

    def handle(line: str, stamp: float) -> None:
        m = regex.search(line)
        if not m:
            return
        groups = m.groupdict()
        step = groups.get("step")
        if step is not None and (step, groups.get("epoch")) == last[0]:
            # a progress bar repainted the same step (a new postfix, the epoch's end): keep the
            # first paint's stamp, the last paint's loss
            collector.update_last_loss(_float(groups.get("loss")))
            return
        last[0] = (step, groups.get("epoch"))
        collector.add_step(StepEvent(step=_int(groups.get("step")), stamp=stamp, loss=_float(groups.get("loss")),
                                     tokens=_int(groups.get("tokens"))))
    return handle


def ignore(line: str, stamp: float) -> None:
    del line, stamp


def on_step_line(spec: TrialSpec, stream: str, handler: Callable[[str, float], None]) -> Callable[[str, float], None]:
    """``handler`` for the stream the spec reads step lines from, :func:`ignore` for the other."""
    return handler if spec.step_stream == stream else ignore


def open_probe_pipe() -> tuple[IO[bytes], int]:
    """A pipe for the probe channel: (the bot's read end as a file, the child's write descriptor)."""
    read_fd, write_fd = os.pipe()
    return os.fdopen(read_fd, "rb"), write_fd
