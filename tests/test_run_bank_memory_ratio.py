"""A verified finding carries its memory ratio to the bank: the GPU's peak where the trials reported one,
else the host's, over the doctor's baseline peak."""

from __future__ import annotations

import pytest

from bot.stages.run.search import memory_ratio
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord

GIB = 2**30
FAST = Candidate.of({"micro_batch": 8}, ["fused_adamw"])


def _record(no: int, candidate: Candidate, outcome: Outcome = Outcome.OK, *, host: int, gpu: int | None = None
            ) -> TrialRecord:
    metrics = TrialMetrics(step_time_s=0.1, peak_mem_bytes=host, device_peak_mem_bytes=gpu)
    return TrialRecord(run_id="r", trial_no=no, candidate=candidate, outcome=outcome, metrics=metrics, cost_s=5.0)


def test_the_host_peak_over_the_baseline_on_a_cpu() -> None:
    records = [_record(1, FAST, host=3 * GIB), _record(2, FAST, host=5 * GIB), _record(3, FAST, host=4 * GIB),
               _record(4, Candidate.of({"micro_batch": 1}), host=GIB),
               _record(5, FAST, Outcome.OOM, host=9 * GIB)]  # not a peak: killed on its way up
    assert memory_ratio(records, FAST, baseline_peak=2 * GIB, baseline_gpu_peak=None) == pytest.approx(2.0)


def test_the_gpus_peak_where_both_the_trials_and_the_baseline_have_it() -> None:
    records = [_record(1, FAST, host=3 * GIB, gpu=30 * GIB)]
    assert memory_ratio(records, FAST, baseline_peak=3 * GIB, baseline_gpu_peak=20 * GIB) == pytest.approx(1.5)
    assert memory_ratio(records, FAST, baseline_peak=2 * GIB, baseline_gpu_peak=None) == pytest.approx(1.5)


def test_no_ok_trial_of_the_candidate_no_ratio() -> None:
    records = [_record(1, FAST, Outcome.OOM, host=9 * GIB), _record(2, Candidate(), host=GIB)]
    assert memory_ratio(records, FAST, baseline_peak=GIB, baseline_gpu_peak=None) is None
