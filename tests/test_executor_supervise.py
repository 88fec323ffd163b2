"""The loop that watches one launched trial: its memory limit, timeout, interrupt, steps, and ending a job
politely once every expected step was seen. Trials are ``sleep`` processes; memory and steps are scripted."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from bot.executors.supervise import supervise
from infrarsi.seams.executor import TrialSpec


def _start(script: str) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def _killer(proc: subprocess.Popen) -> tuple[list[int], object]:
    calls: list[int] = []

    def kill() -> None:
        calls.append(1)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return calls, kill


def _series(*values: int) -> Iterator[int]:
    yield from values
    while True:
        yield values[-1]


def _run(proc: subprocess.Popen, spec: TrialSpec, *, samples: Iterator[int] | None = None,
         steps: Iterator[int] | None = None, stop: threading.Event | None = None, **kw: object):  # noqa: ANN202
    calls, kill = _killer(proc)
    samples = samples or _series(0)
    steps = steps or _series(0)
    done = _series(0)

    def step_count() -> int:
        return next(done)

    def sample() -> int:
        nonlocal done
        value = next(samples)
        done = _series(next(steps))  # steps() is read several times per sample: hold one value per sample
        return value
    kw.setdefault("on_step", None)
    out = supervise(proc, spec, start=time.perf_counter(), sample=sample, kill=kill, stop=stop or threading.Event(),
                    interval_s=0.005, steps=step_count, **kw)
    return out, calls


def test_a_job_that_exits_keeps_its_status_and_peak() -> None:
    proc = _start("sleep 0.1; exit 3")
    out, calls = _run(proc, TrialSpec(argv=("x",), cwd="."), samples=_series(10, 50, 20))
    assert (out.status, out.killed_for, out.peak_bytes, out.stopped) == (3, None, 50, False)
    assert proc.returncode == 3 and out.cpu_s is not None and out.wall_s >= 0.1
    assert calls  # the final kill of any descendant left behind


def test_the_memory_limit_the_timeout_and_an_interrupt_kill_the_job() -> None:
    proc = _start("sleep 30")
    out, _ = _run(proc, TrialSpec(argv=("x",), cwd=".", memory_limit_bytes=100), samples=_series(10, 100))
    assert (out.killed_for, out.status, out.peak_bytes) == ("memory", -9, 100)
    proc = _start("sleep 30")
    out, _ = _run(proc, TrialSpec(argv=("x",), cwd=".", timeout_s=0.05))
    assert (out.killed_for, out.status) == ("timeout", -9) and out.wall_s < 5
    stop = threading.Event()
    stop.set()
    proc = _start("sleep 30")
    out, _ = _run(proc, TrialSpec(argv=("x",), cwd="."), stop=stop)
    assert (out.killed_for, out.status, out.stopped) == ("interrupt", -9, False)


def test_after_the_expected_steps_the_job_is_terminated_then_killed_after_the_grace() -> None:
    seen: list[int] = []
    proc = _start("sleep 30")
    out, _ = _run(proc, TrialSpec(argv=("x",), cwd=".", expected_steps=2), steps=_series(0, 1, 2),
                  on_step=seen.append, linger_s=0.0)
    assert (out.stopped, out.killed_for, out.status) == (True, None, -signal.SIGTERM)
    assert seen == [1, 2]
    proc = _start("sleep 30")  # a polite end the job ignores: killed after the grace
    terminated: list[int] = []
    out, _ = _run(proc, TrialSpec(argv=("x",), cwd=".", expected_steps=1), steps=_series(1),
                  terminate=lambda: terminated.append(1), linger_s=0.0, grace_s=0.05)
    assert terminated == [1] and (out.stopped, out.status) == (True, -9)


def test_steady_memory_is_the_least_sample_of_a_closed_step_window() -> None:
    proc = _start("sleep 30")
    # samples with steps: (0: 500) (1: 90, 70) (2: 80, 300) (3: ...) -> windows 1 and 2 closed: min(70, 80)
    samples = _series(500, 90, 70, 80, 300, 60, 1000)
    steps = _series(0, 1, 1, 2, 2, 3, 3)
    out, _ = _run(proc, TrialSpec(argv=("x",), cwd=".", memory_limit_bytes=1000), samples=samples, steps=steps)
    assert out.killed_for == "memory" and out.steady_bytes == 70 and out.peak_bytes == 1000


def test_an_error_in_the_loop_kills_the_job_and_is_raised() -> None:
    proc = _start("sleep 30")
    calls, kill = _killer(proc)

    def boom() -> int:
        raise RuntimeError("sampler broke")
    with pytest.raises(RuntimeError, match="sampler broke"):
        supervise(proc, TrialSpec(argv=("x",), cwd="."), start=time.perf_counter(), sample=boom, kill=kill,
                  stop=threading.Event(), interval_s=0.005, steps=lambda: 0, on_step=None)
    assert len(calls) == 2 and proc.returncode == -9
