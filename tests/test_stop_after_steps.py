"""A trial ends once its measured steps were seen: SIGTERM to the group, a grace period, SIGKILL; outcome ok."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from bot.executors import supervise
from bot.executors.local import LocalExecutor
from infrarsi.measure import classify, summarize
from infrarsi.seams.executor import TrialSpec
from infrarsi.trial_record import Outcome

JOB = textwrap.dedent('''
    import signal, sys, time
    steps, first, every, ignore_term = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    if ignore_term:
        signal.signal(signal.SIGTERM, lambda *a: None)
    for step in range(first, first + steps):
        time.sleep(0.02)
        if step % every == 0:
            print(f"step {step} loss {5.0 - step / 1e5:.5f}", flush=True)
''')
REGEX = r"step (?P<step>\d+) loss (?P<loss>\S+)"


def _run(tmp_path: Path, steps: int, *, expected: int, first: int = 0, every: int = 1, ignore_term: bool = False,
         stream: str = "stdout") -> tuple[float, object]:
    script = tmp_path / "job.py"
    script.write_text(JOB if stream == "stdout" else JOB.replace("flush=True", "file=sys.stderr, flush=True"))
    spec = TrialSpec(argv=(sys.executable, str(script), str(steps), str(first), str(every), "1" if ignore_term
                           else "0"), cwd=str(tmp_path), timeout_s=60, source="stdout", stdout_regex=REGEX,
                     expected_steps=expected, step_stream=stream)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    execution = LocalExecutor().execute(spec)
    return time.perf_counter() - t0, execution


@pytest.mark.parametrize("first", [0, 1])
def test_job_configured_for_100k_steps_ends_after_the_measured_ones(tmp_path: Path, first: int) -> None:
    warmup, measured = 2, 6
    long_s, long = _run(tmp_path, 100_000, expected=warmup + measured, first=first)
    exact_s, exact = _run(tmp_path, warmup + measured, expected=warmup + measured, first=first)
    assert long.stopped_after_steps and not exact.stopped_after_steps
    metrics = summarize(long, warmup=warmup, measured=measured)
    outcome, reason = classify(long, metrics, warmup=warmup, measured=measured, tokens_per_step=1)
    assert outcome is Outcome.OK, reason
    assert long_s < 2 * exact_s + 1.0, (long_s, exact_s)  # + the linger before SIGTERM on a tiny job
    assert long.events[0].step == first


def test_a_job_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    # linger and grace are the loop's keyword defaults (terminate, linger_s, grace_s): shorten them
    monkeypatch.setattr(supervise.supervise, "__defaults__", (None, 0.1, 0.5))
    wall, execution = _run(tmp_path, 100_000, expected=4, ignore_term=True)
    assert execution.stopped_after_steps and execution.returncode == -9
    assert wall < 10
    metrics = summarize(execution, warmup=1, measured=3)
    assert classify(execution, metrics, warmup=1, measured=3, tokens_per_step=1)[0] is Outcome.OK


def test_a_line_every_k_steps_counts_k_steps(tmp_path: Path) -> None:
    _, execution = _run(tmp_path, 100_000, expected=5, every=4)
    steps = [e.step for e in execution.events]
    assert steps[:5] == [0, 4, 8, 12, 16]
    per_line = summarize(execution, warmup=1, measured=4, steps_per_line=4)
    per_step_line = summarize(execution, warmup=1, measured=4, steps_per_line=1)
    assert per_line.step_time_s == pytest.approx(per_step_line.step_time_s / 4)


def test_step_lines_on_stderr(tmp_path: Path) -> None:
    _, execution = _run(tmp_path, 6, expected=6, stream="stderr")
    assert len(execution.events) == 6


def test_progress_bar_repaints_keep_first_stamp_and_last_loss(tmp_path: Path) -> None:
    script = tmp_path / "bar.py"
    script.write_text(textwrap.dedent('''
        import sys, time
        for n in range(1, 5):
            time.sleep(0.02)
            sys.stdout.write(f"\\rEpoch 0: {n}/4 [00:00<00:00, 3.0it/s, train_loss={n - 1}.5]")
            sys.stdout.write(f"\\rEpoch 0: {n}/4 [00:00<00:00, 3.0it/s, train_loss={n}.5]")
            sys.stdout.flush()
        sys.stdout.write("\\n")
    '''))
    regex = r"(?P<step>[1-9]\d*)(?:/\d+)?\s*\[[^\]]*?\btrain_loss=\s*(?P<loss>[-+0-9.]+)"
    spec = TrialSpec(argv=(sys.executable, str(script)), cwd=str(tmp_path), timeout_s=60, source="stdout",
                     stdout_regex=regex, expected_steps=None)
    execution = LocalExecutor().execute(spec)
    assert [(e.step, e.loss) for e in execution.events] == [(1, 1.5), (2, 2.5), (3, 3.5), (4, 4.5)]
