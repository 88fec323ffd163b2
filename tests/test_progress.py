"""The progress ticker: silent while the work is quick, then at most one line per interval, closed only if it spoke."""

from __future__ import annotations

import io
import time

import pytest

from bot import progress
from bot.progress import Ticker


class Clock:
    def __init__(self) -> None:
        self.now = time.perf_counter()  # a Ticker made after this starts within microseconds of it

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", c)
    return c


def test_quick_work_prints_nothing_not_even_the_closing_line(clock: Clock) -> None:
    out = io.StringIO()
    t = Ticker(label="scan", stream=out)
    clock.now += 4.9
    t.tick(1, 10, "a.py")
    t.done("10 files")
    assert out.getvalue() == ""


def test_slow_work_speaks_after_the_quiet_time_then_at_most_every_interval(clock: Clock) -> None:
    out = io.StringIO()
    t = Ticker(label="scan", stream=out, quiet_s=5.0, every_s=5.0)
    clock.now += 6
    t.tick(3, 10, "a.py")
    clock.now += 2
    t.tick(4, 10)  # too soon after the last line
    clock.now += 3
    t.tick(5, 10)
    t.done("10 files")
    assert out.getvalue().splitlines() == ["scan: 3/10 a.py (6 s)", "scan: 5/10 (11 s)", "scan: 10 files (11 s)"]


def test_default_stream_is_stderr_at_the_time_of_printing(clock: Clock, capsys: pytest.CaptureFixture[str]) -> None:
    t = Ticker(label="reach", quiet_s=0.0)
    clock.now += 1
    t.tick(1, 2)
    assert capsys.readouterr().err == "reach: 1/2 (1 s)\n"
