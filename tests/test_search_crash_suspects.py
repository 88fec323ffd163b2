"""A failed trial is blamed on the settings and pairs of settings that never ran elsewhere.

The case from the cluster simulator (deepseek-moe-16b on two A100 nodes): 28 layers
do not split into pp x vpp stages when vpp = 4 and pp is 2 or 4; three crashes in
three trials with vpp = 4 left the logistic model's next vpp = 4 candidate at
P(runs) 0.91.
"""

from __future__ import annotations

import pytest

from infrarsi.contract.model import Knob
from infrarsi.search.crash_suspects import MAX_BLAME, CrashSuspects
from infrarsi.search.engine import SearchEngine
from infrarsi.search.features import Priors
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord


def c(*patches: str, pp: int = 1, vpp: int = 1, tp: int = 1) -> Candidate:
    return Candidate.of({"pp": pp, "vpp": vpp, "tp": tp}, list(patches))


def test_a_setting_that_failed_every_time_and_never_ran_carries_the_blame() -> None:
    ran = [c(), c(pp=2), c(pp=4, tp=2), c(pp=2, vpp=2)]
    failed = [c(pp=2, vpp=4), c(pp=4, vpp=4, tp=2)]
    suspects = CrashSuspects.fit(ran, failed)
    again, elsewhere, cleared = suspects.prob_fail([c(pp=2, vpp=4, tp=2), c(pp=4, vpp=2), c(pp=2, tp=2)])
    # vpp=4 is half of each failure's mass (the single suspect); its pairs with what ran add more
    assert again > 1 - (1 - MAX_BLAME * 0.5) ** 2
    assert elsewhere < 0.3  # pp=4 with vpp=2: only the untried pair (pp=4, vpp=2) is new, and it failed nowhere
    assert cleared == 0.0  # every setting and pair of it ran


def test_a_pair_is_blamed_when_each_of_its_settings_ran_without_the_other() -> None:
    ran = [c(pp=2), c(vpp=4), c(tp=2, pp=2), c(tp=2, vpp=4)]
    suspects = CrashSuspects.fit(ran, [c(pp=2, vpp=4)])
    pair, pair_and_more, apart = suspects.prob_fail([c(pp=2, vpp=4, tp=2), c("fast", pp=2, vpp=4),
                                                     c(pp=2, tp=2)])
    assert pair == pytest.approx(MAX_BLAME)  # the only suspect: (pp=2, vpp=4)
    assert pair_and_more == pytest.approx(MAX_BLAME)
    assert apart == 0.0


def test_a_failure_whose_every_setting_and_pair_ran_elsewhere_is_left_to_the_logistic_model() -> None:
    ran = [c(pp=2, vpp=4), c(pp=2, tp=2), c(vpp=4, tp=2)]
    suspects = CrashSuspects.fit(ran, [c(pp=2, vpp=4, tp=2)])  # a three-setting rule, or a flake
    assert suspects.n_failures == 0
    assert suspects.prob_fail([c(pp=2, vpp=4, tp=2), c()]).tolist() == [0.0, 0.0]


def test_a_patch_that_always_failed_is_suspect_and_its_absence_is_not() -> None:
    suspects = CrashSuspects.fit([c(), c(pp=2)], [c("broken")])
    with_it, without = suspects.prob_fail([c("broken", pp=2), c(pp=2)])
    assert with_it >= MAX_BLAME * 0.5 and without == 0.0


def _space() -> SearchSpace:
    return SearchSpace.from_contract([Knob(name="pp", kind="int", default=1, values=(1, 2, 4)),
                                      Knob(name="vpp", kind="int", default=1, values=(1, 2, 4)),
                                      Knob(name="tp", kind="int", default=1, values=(1, 2, 4))], [], [])


def _record(no: int, cand: Candidate, outcome: Outcome) -> TrialRecord:
    ok = outcome == Outcome.OK
    metrics = TrialMetrics(step_time_s=1.0 / no if ok else None, peak_mem_bytes=2**30 if ok else None)
    return TrialRecord(run_id="r", trial_no=no, candidate=cand, outcome=outcome, metrics=metrics, cost_s=10.0)


def test_the_engine_reads_the_suspects_in_its_chance_to_run() -> None:
    """The simulator's case through the engine: after vpp=4 failed with pp 2 and 4, a third vpp=4 with
    settings that ran is a poor bet; the same settings with vpp=2 are not."""
    history = [_record(1, c(), Outcome.OK), _record(2, c(pp=2, tp=2), Outcome.OK),
               _record(3, c(pp=2, vpp=4), Outcome.CRASH), _record(4, c(pp=4, vpp=4, tp=2), Outcome.CRASH),
               _record(5, c(pp=4, vpp=2), Outcome.OK), _record(6, c(tp=4), Outcome.OK)]
    engine = SearchEngine(_space(), Priors(), memory_limit=2.0**34, seed=0)
    engine.observe(history)
    models = engine.models
    probe = [c(pp=2, vpp=4, tp=2), c(pp=2, vpp=2, tp=2)]
    logistic = models.feasibility.prob_ok(models.design(probe))
    doomed, fine = models.prob_ok(probe)
    assert doomed < logistic[0] / 4 and doomed < 0.05
    assert fine == pytest.approx(logistic[1]) and fine > 0.6  # nothing of it is suspect
    picks = engine.next_batch(3)
    assert all(p.candidate.knob_dict()["vpp"] != 4 for p in picks[:2])


def test_the_run_reports_what_its_failures_are_blamed_on() -> None:
    history = [_record(1, c(), Outcome.OK), _record(2, c(pp=2, tp=2), Outcome.OK),
               _record(3, c(pp=2, vpp=4), Outcome.CRASH), _record(4, c(pp=4, vpp=4, tp=2), Outcome.CRASH)]
    engine = SearchEngine(_space(), Priors(), memory_limit=2.0**34, seed=0)
    engine.observe(history)
    rows = engine.posterior_report().to_dict()["crash_suspects"]
    # vpp=4 is the first failure's only single suspect (half its mass) and shares the second's with pp=4
    assert rows[0] == {"setting": "vpp=4", "failures": 2, "blame": pytest.approx(0.75)}
    assert rows[1] == {"setting": "pp=4", "failures": 1, "blame": pytest.approx(0.25)}
    assert all(r["blame"] <= r["failures"] for r in rows) and len(rows) == 5
