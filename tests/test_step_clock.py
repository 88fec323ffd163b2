"""The step clock: a statistic that holding, batching or pacing step events can only make longer."""

from __future__ import annotations

import random

import pytest

from infrarsi.step_clock import counted_inside, counted_window, draw_count_step, measure_clock, paced
from infrarsi.witness import WitnessReport

T = 0.02  # the job's true step time


def _report(step_t: list[float], *, count_step: int = 0, counted_s: float | None = None) -> WitnessReport:
    return WitnessReport(optimizer_steps=len(step_t), count_step=count_step, flops=None, flops_by_op=(),
                         matmul_dtypes=(), counted_s=counted_s, params=0, param_elements=0, grad_norms=(),
                         weight_norms=(), update_proj=(), tampered=(), source_sha256="x", step_t=tuple(step_t))


def _honest(steps: int = 8, lag: float = 0.001) -> tuple[list[float], list[float]]:
    """(stamps of every line, the witness's end of every optimizer step): a line printed just after its step."""
    ends = [100.0 + T * (i + 1) for i in range(steps)]
    return [e + lag for e in ends], ends


def test_an_honest_job_reads_its_step_time_anchored_or_not() -> None:
    stamps, ends = _honest()
    window = stamps[1:8]  # warm-up 2, measured 6: the stamps of lines 2..8
    anchored = measure_clock(window, _report(ends), warmup=2, measured=6)
    assert anchored.how == "anchored" and anchored.step_time_s == pytest.approx(T, rel=0.02)
    alone = measure_clock(window, None, warmup=2, measured=6)
    assert alone.how == "span" and alone.step_time_s == pytest.approx(T, rel=1e-9)


def test_events_held_back_and_released_half_a_step_apart_read_no_faster() -> None:
    _, ends = _honest()
    # the job holds line 2 until step 5 ended, then releases one line every half step: the last on time
    window = [ends[7] - (7 - i) * T / 2 for i in range(1, 8)]
    assert window[0] >= ends[1]  # never before its step: that would show in the step count
    naive = (window[-1] - window[0]) / 6
    assert naive == pytest.approx(T / 2)  # a median, or the bot's span alone, reads it 2x faster
    clock = measure_clock(window, _report(ends), warmup=2, measured=6)
    assert clock.step_time_s is not None and clock.step_time_s >= T * 0.99
    assert paced([T / 2] * 6, _report(ends), first_step=clock.first_step, last_step=clock.last_step)


def test_pacing_without_delaying_the_first_event_cannot_shrink_the_span() -> None:
    stamps, ends = _honest()
    window = stamps[1:8]
    bunched = [window[0], *[window[0] + 0.001 * i for i in range(1, 6)], window[-1]]  # most at once, last on time
    assert measure_clock(bunched, None, warmup=2, measured=6).step_time_s == pytest.approx(T, rel=1e-9)


def test_a_delayed_last_event_only_makes_it_longer() -> None:
    stamps, ends = _honest()
    window = stamps[1:8]
    late = [*window[:-1], window[-1] + 0.05]
    assert measure_clock(late, _report(ends), warmup=2, measured=6).step_time_s > T


def test_the_counted_step_inside_the_window_is_taken_off_with_its_witnessed_time() -> None:
    ends, t = [], 100.0
    for step in range(1, 9):
        t += 5 * T if step == 5 else T  # the counted step runs under the FLOP counter, five times slower
        ends.append(t)
    window = [e + 0.001 for e in ends[1:8]]
    clock = measure_clock(window, _report(ends, count_step=5, counted_s=5 * T), warmup=2, measured=6)
    assert clock.step_time_s == pytest.approx(T, rel=0.02)
    # making the counted step longer on purpose lengthens the span by as much: nothing gained
    ends2 = [e + (0.5 if i >= 4 else 0.0) for i, e in enumerate(ends)]
    window2 = [e + 0.001 for e in ends2[1:8]]
    slow = measure_clock(window2, _report(ends2, count_step=5, counted_s=5 * T + 0.5), warmup=2, measured=6)
    assert slow.step_time_s == pytest.approx(T, rel=0.02)


def test_a_job_that_prints_every_k_steps_is_divided_by_its_optimizer_steps() -> None:
    k = 10
    ends = [100.0 + T * (i + 1) for i in range(8 * k)]
    window = [ends[j * k - 1] + 0.001 for j in range(2, 9)]  # line j after step j*k (HF style)
    clock = measure_clock(window, _report(ends), warmup=2, measured=6, steps_per_line=k)
    assert clock.step_time_s == pytest.approx(T, rel=0.02)
    mingpt = [ends[(j - 1) * k] + 0.001 for j in range(2, 9)]  # line j after step (j-1)k+1 (minGPT style)
    assert measure_clock(mingpt, _report(ends), warmup=2, measured=6, steps_per_line=k).step_time_s == \
        pytest.approx(T, rel=0.02)


def test_honest_periodic_work_is_not_read_as_pacing() -> None:
    ends, t = [], 100.0
    for step in range(1, 9):
        t += 10 * T if step % 3 == 0 else T  # an evaluation every third step
        ends.append(t)
    intervals = [b - a for a, b in zip(ends[1:], ends[2:])]
    assert paced(intervals, _report(ends), first_step=2, last_step=8) is None


@pytest.mark.parametrize("warmup, measured, k", [(2, 6, 1), (1, 3, 1), (2, 12, 1), (2, 6, 10), (5, 20, 1)])
def test_the_counted_step_is_drawn_strictly_inside_the_window(warmup: int, measured: int, k: int) -> None:
    rng = random.Random(0)
    drawn = {draw_count_step(warmup, measured, k, rng) for _ in range(300)}
    low, high = counted_window(warmup, measured, k)  # type: ignore[misc]
    assert drawn == set(range(low, high + 1)) and all(counted_inside(s, warmup, measured, k) for s in drawn)
    assert low > warmup * k and high < (warmup + measured) * k


def test_a_window_too_short_to_hide_the_counted_step_counts_a_warm_up_step() -> None:
    assert counted_window(1, 1) is None and draw_count_step(1, 1) == 2
    assert not counted_inside(2, 1, 1)


def test_a_job_that_skips_optimizer_steps_reads_its_span_without_an_anchor() -> None:
    # every other step skips its update: the witness saw half as many steps as there are lines, so there is
    # nothing to anchor the window to; the span stands (the step-count row convicts the skip)
    stamps, ends = _honest()
    window = stamps[1:8]
    clock = measure_clock(window, _report(ends[::2]), warmup=2, measured=6)
    assert clock.how == "span" and clock.step_time_s == pytest.approx(T, rel=1e-9)
