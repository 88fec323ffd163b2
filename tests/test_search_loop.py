"""The state the run's phases share: the budget counts a re-measured trial once, batches yield in order, and a
search trial inside the band vindicates its patches (the rest is run end to end in test_run_*.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from bot.stages.run.search_loop import SearchLoop, run_batch, vindicates
from infrarsi.loss_band import calibrate
from infrarsi.trial_record import Candidate
from tests.support.witnessed import trial

LOSS = (5.0, 4.8, 4.6)
CAND = Candidate.of({"micro_batch": 4})


def _loop(**kw: object) -> SearchLoop:
    ctx = SimpleNamespace(contract=SimpleNamespace(defaults=lambda: {"micro_batch": 1}), journal=None, run_id="r")
    doctor = SimpleNamespace(median_s=1.0, sigma_log=0.05)
    args = {"budget_seconds": None, **kw}
    return SearchLoop(ctx=ctx, run_id="r", doctor=doctor, progress=lambda e: None, budget_trials=3,  # type: ignore[arg-type]
                      parallel=1, rebuild=lambda loop, records: (None, None),  # type: ignore[arg-type]
                      space=None, engine=None, **args)  # type: ignore[arg-type]


def test_a_trial_measured_again_counts_once_against_the_budget() -> None:
    loop = _loop(search=[trial(n, 1.0, cand=CAND, loss=LOSS) for n in (1, 2, 3)], superseded={2})
    assert [r.trial_no for r in loop.settled()] == [1, 3] and not loop.spent()
    loop.search.append(trial(4, 1.0, cand=CAND, loss=LOSS))
    assert loop.spent()


def test_a_seconds_budget_is_spent_by_the_clock() -> None:
    assert _loop(budget_seconds=10.0, started=time.time() - 11.0).spent()


def test_a_batch_yields_its_records_in_order(tmp_path: Path) -> None:
    ran: list[Candidate] = []

    def run(run_id: str, candidate: Candidate) -> object:
        ran.append(candidate)
        return trial(len(ran), 1.0, cand=candidate, loss=LOSS)

    ctx = SimpleNamespace(run=run)
    out = list(run_batch(ctx, "r", [CAND, Candidate.of({"micro_batch": 2})], parallel=1))  # type: ignore[arg-type]
    assert [r.trial_no for r in out] == [1, 2] and ran[0] == CAND


def test_a_trial_inside_the_band_vindicates_and_one_outside_does_not() -> None:
    band = calibrate([LOSS, LOSS], rtol=0.02, final_rtol=0.01)
    doctor = SimpleNamespace(loss_band=band, printed_band=None, measured_steps=None)
    inside = trial(1, 1.0, cand=CAND, loss=LOSS)
    assert vindicates(inside, doctor)  # type: ignore[arg-type]
    outside = replace(inside, metrics=replace(inside.metrics, loss=(5.0, 4.8, 5.5)))
    assert not vindicates(outside, doctor)  # type: ignore[arg-type]
