"""A trial's output read as it arrives: lines split on \\n, \\r\\n and \\r, each stamped by the bot's clock; probe
events and step lines collected."""

from __future__ import annotations

import io
import itertools
import json
import os
from pathlib import Path

from bot.executors.streams import (LineReader, StepCollector, ignore, on_step_line, open_probe_pipe, probe_handler,
                                   regex_handler)
from infrarsi.seams.executor import TrialSpec
from infrarsi.trial_record import StepEvent


def _read(data: bytes, tmp_path: Path | None = None, **kw: object) -> tuple[list[tuple[str, float]], LineReader]:
    seen: list[tuple[str, float]] = []
    clock = itertools.count(1.0)
    reader = LineReader(io.BytesIO(data), lambda line, stamp: seen.append((line, stamp)),
                        clock=lambda: next(clock), log_path=tmp_path / "out.log" if tmp_path else None, **kw)
    reader.run()
    return seen, reader


def test_carriage_returns_end_lines_blank_ones_are_dropped_and_the_log_is_whole(tmp_path: Path) -> None:
    data = b"a\r\nstep 1\rstep 2\r\n\n  \nlast-without-newline \xff"
    seen, reader = _read(data, tmp_path)
    assert [line for line, _ in seen] == ["a", "step 1", "step 2", "last-without-newline \ufffd"]
    assert (tmp_path / "out.log").read_bytes() == data
    assert seen[0][1] == seen[2][1] == 1.0 and seen[3][1] == 2.0  # one read, one stamp; the unfinished line later


def test_the_tail_keeps_the_last_lines_within_a_size() -> None:
    _, reader = _read(b"".join(f"line {i}\n".encode() for i in range(10)), tail_lines=3)
    assert reader.tail_text() == "line 7\nline 8\nline 9"
    assert reader.tail_text(max_chars=6) == "line 9"


def test_probe_events_are_collected_and_foreign_lines_ignored() -> None:
    c = StepCollector()
    handle = probe_handler(c)
    for record in ({"event": "phase", "name": "forward", "seconds": 0.5},
                   {"event": "step", "step": 1, "loss": "2.5", "tokens": 64, "t": 0.1},
                   {"event": "memory", "peak_bytes": 100, "steady_bytes": 40, "capacity_bytes": 1000, "rank": 0},
                   {"event": "memory", "peak_bytes": 80, "steady_bytes": 60, "capacity_bytes": 900, "rank": 1},
                   {"event": "memory", "steady_bytes": 30, "rank": 0},
                   {"event": "info", "t": 1.0, "world": 2},
                   {"event": "oom", "message": "CUDA out of memory"},
                   {"event": "step", "step": "x"}):
        handle(json.dumps(record), 7.0)
    handle("not json {", 8.0)
    handle("[1, 2]", 8.0)
    assert c.steps == [StepEvent(step=1, stamp=7.0, loss=2.5, tokens=64, child_t=0.1), StepEvent(step=None, stamp=7.0)]
    assert c.phases == [(1, "forward", 0.5)]
    assert (c.device_peak, c.device_steady, c.device_capacity) == (100, 60, 900)
    assert c.info == {"world": 2} and c.oom == "CUDA out of memory"


def test_regex_step_lines_and_a_repainted_progress_bar() -> None:
    c = StepCollector()
    handle = regex_handler(c, r"step (?P<step>\d+) loss (?P<loss>[\d.]+)")
    handle("step 1 loss 3.0", 1.0)
    handle("step 1 loss 2.9", 1.5)  # the same step repainted: its loss, the first stamp
    handle("noise", 1.7)
    handle("step 2 loss 2.0", 2.0)
    assert c.steps == [StepEvent(step=1, stamp=1.0, loss=2.9), StepEvent(step=2, stamp=2.0, loss=2.0)]
    c.update_last_loss(None)
    assert c.steps[-1].loss == 2.0


def test_the_step_handler_reads_only_the_specs_stream() -> None:
    spec = TrialSpec(argv=("x",), cwd=".", step_stream="stderr")
    assert on_step_line(spec, "stderr", print) is print and on_step_line(spec, "stdout", print) is ignore


def test_the_probe_pipe_carries_bytes_to_the_bots_end() -> None:
    read, write_fd = open_probe_pipe()
    os.write(write_fd, b'{"event": "step"}\n')
    os.close(write_fd)
    with read:
        assert read.read() == b'{"event": "step"}\n'
