"""infrarsi/search/models.py: which trial record feeds which of the three fitted models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.contract.model import Knob
from infrarsi.search.features import Priors, build_features
from infrarsi.search.models import fit_models, in_domain
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

KNOBS = (Knob(name="mb", kind="int", default=1, values=(1, 2, 4, 8), flag="--mb"),
         Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"), flag="--dtype"))
SPACE = SearchSpace.from_contract(KNOBS, (), ())
FEATURES = build_features(SPACE, Priors())


def _record(no: int, mb: int, outcome: Outcome = Outcome.OK, dtype: str = "fp32") -> TrialRecord:
    step = 0.1 / math.sqrt(mb) * (0.6 if dtype == "bf16" else 1.0)
    ok = outcome == Outcome.OK
    return TrialRecord(run_id="r", trial_no=no, candidate=Candidate.of({"mb": mb, "dtype": dtype}), outcome=outcome,
                       metrics=TrialMetrics(step_time_s=step if ok else None, peak_mem_bytes=2**26 * mb if ok else None))


RECORDS = [_record(1, 1), _record(2, 2), _record(3, 4, dtype="bf16"), _record(4, 8), _record(5, 2, dtype="bf16"),
           _record(6, 8, Outcome.CRASH, dtype="bf16")]


def test_a_candidate_outside_the_spaces_domains_is_not_in_it() -> None:
    assert in_domain(SPACE, SPACE.complete(Candidate.of({"mb": 4})))
    assert not in_domain(SPACE, SPACE.complete(Candidate.of({"mb": 3})))
    assert not in_domain(SPACE, SPACE.complete(Candidate.of({"mb": 4}, ("no_such_patch",))))


def test_refitting_the_same_records_in_another_order_gives_the_same_numbers() -> None:
    a = fit_models(SPACE, FEATURES, Priors(), RECORDS, memory_limit=None)
    b = fit_models(SPACE, FEATURES, Priors(), list(reversed(RECORDS)), memory_limit=None)
    probe = [Candidate.of({"mb": mb, "dtype": d}) for mb in (1, 8) for d in ("fp32", "bf16")]
    for x, y in zip(a.predict_time(probe), b.predict_time(probe)):
        np.testing.assert_allclose(x, y)
    np.testing.assert_allclose(a.prob_ok(probe), b.prob_ok(probe))


def test_a_rejected_or_interrupted_trial_feeds_no_model_and_a_crash_only_feasibility() -> None:
    base = fit_models(SPACE, FEATURES, Priors(), RECORDS[:5], memory_limit=None)
    more = RECORDS[:5] + [_record(7, 1, Outcome.REJECTED), _record(8, 1, Outcome.INTERRUPTED, dtype="bf16")]
    same = fit_models(SPACE, FEATURES, Priors(), more, memory_limit=None)
    probe = [Candidate.of({"mb": 8, "dtype": "bf16"})]
    assert same.prob_ok(probe) == pytest.approx(base.prob_ok(probe))
    assert same.predict_time(probe)[0] == pytest.approx(base.predict_time(probe)[0])
    crashed = fit_models(SPACE, FEATURES, Priors(), RECORDS, memory_limit=None)
    assert crashed.predict_time(probe)[0] == pytest.approx(base.predict_time(probe)[0])  # no step time: no time row
    assert crashed.prob_ok(probe)[0] < base.prob_ok(probe)[0]  # the crash lowers the odds where it happened
