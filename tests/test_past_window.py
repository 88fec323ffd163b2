"""The look past the measured window: the candidate's first-pair run held to the baseline's past the steps it knew."""

from __future__ import annotations

import random

from infrarsi.past_window import draw_extra_lines, past_window_row
from infrarsi.trial_record import Candidate
from tests.support.witnessed import ADAMW, OPTIMIZER, report, trial, work_reference

CAND = Candidate.of({"dtype": "bf16"})
LOSSES = tuple(5.0 - 0.1 * i for i in range(16))


def _run(no: int, **changes: object):  # noqa: ANN202
    seen = report(**{"optimizer_steps": 16, "at": "step", "backward_loss": LOSSES, **changes})
    return trial(no, 0.5, cand=CAND, loss=(5.0,), witness=seen)


def test_the_same_job_past_the_window_passes() -> None:
    row = past_window_row(_run(1), _run(2), reference=work_reference(), window_end=8)
    assert row.ok, row.detail
    assert "8 past the window" in row.detail


def test_a_job_that_ends_with_its_window_has_nothing_past_it() -> None:
    row = past_window_row(_run(1, optimizer_steps=8), _run(2, optimizer_steps=8), reference=work_reference(),
                          window_end=8)
    assert row.ok and "nothing past the window" in row.detail


def test_a_schedule_changed_after_the_window_is_caught() -> None:
    later = {**OPTIMIZER, "timeline": [[1, [ADAMW]], [11, [{**ADAMW, "lr": 1.2e-3}]]]}
    row = past_window_row(_run(1), _run(2, optimizer=(later,)), reference=work_reference(), window_end=8)
    assert row.broken and "optimizer step 11" in row.detail


def test_a_loss_that_leaves_the_baseline_past_the_window_is_caught() -> None:
    drift = tuple(v * (1.0 if i < 10 else 1.02) for i, v in enumerate(LOSSES))
    row = past_window_row(_run(1), _run(2, backward_loss=drift), reference=work_reference(), window_end=8)
    assert row.broken and "optimizer step 11" in row.detail


def test_a_parameter_frozen_past_the_window_is_caught() -> None:
    frozen = ((0.2, 0.3, -0.1), (-0.1, 0.05, 0.2), (0.0, 0.0, 0.0))
    row = past_window_row(_run(1), _run(2, update_projs=frozen), reference=work_reference(), window_end=8)
    assert row.broken and "parameter 2" in row.detail


def test_the_extra_lines_are_drawn_past_the_window() -> None:
    rng = random.Random(0)
    drawn = {draw_extra_lines(6, rng) for _ in range(200)}
    assert drawn == set(range(6, 13))


def test_a_job_whose_own_repeats_differ_is_not_convicted_for_differing_as_much_past_the_window() -> None:
    # issue 47's widepkg: an enwik8 script that seeds nothing, so every run samples other batches; its doctor
    # repeats' updates differ by far more than the 5% floor, and so did the pair's baseline and candidate
    other = ((0.5, -0.2, 0.1), (0.2, 0.3, -0.3), (-0.05, 0.06, 0.02))
    wide = work_reference()
    wide = type(wide)(reports=(wide.reports[0], report(update_proj=(0.5, 0.2, -0.05), update_projs=other)),
                      first_loss=wide.first_loss, allowed_dtypes=wide.allowed_dtypes)
    moved = {"update_proj": (0.5, 0.2, -0.05), "update_projs": other}
    assert past_window_row(_run(1), _run(2, **moved), reference=wide, window_end=8).ok
    assert past_window_row(_run(1), _run(2, **moved), reference=work_reference(), window_end=8).broken


def test_a_resplit_of_a_model_with_dropout_compares_its_optimizer_not_its_numbers() -> None:
    # masks are drawn per micro-batch: a re-split draws others, so its weights drift from the default split's
    # baseline as two seeds would; the optimizer past the window is still held to the baseline's
    sites = ((0.2, (64, 64), 4096, "keyed"),)
    frozen = ((0.2, 0.3, -0.1), (-0.1, 0.05, 0.2), (0.0, 0.0, 0.0))
    drifted = past_window_row(_run(1, dropout=sites), _run(2, dropout=sites, update_projs=frozen),
                              reference=work_reference(), window_end=8, resplit=True)
    assert drifted.status.value == "not_checked" and "re-splits the global batch" in drifted.detail
    later = {**OPTIMIZER, "timeline": [[1, [ADAMW]], [11, [{**ADAMW, "lr": 1.2e-3}]]]}
    changed = past_window_row(_run(1, dropout=sites), _run(2, dropout=sites, optimizer=(later,)),
                              reference=work_reference(), window_end=8, resplit=True)
    assert changed.broken, changed.detail
    # without dropout a re-split's numbers past the window are the baseline's: compared
    assert past_window_row(_run(1), _run(2, update_projs=frozen), reference=work_reference(), window_end=8,
                           resplit=True).broken
