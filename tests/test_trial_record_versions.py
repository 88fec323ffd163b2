"""Trial records across schema versions: an older record reads with the new fields absent, a newer one is refused
with a sentence (not a TypeError on an unknown field)."""

from __future__ import annotations

import pytest

from infrarsi.trial_record import TRIAL_SCHEMA_VERSION, Candidate, Outcome, TrialMetrics, TrialRecord


def _record() -> TrialRecord:
    return TrialRecord(run_id="r", trial_no=3, candidate=Candidate.of({"micro_batch": 4}, ["fused_gelu"]),
                       outcome=Outcome.OK, cost_s=2.5,
                       metrics=TrialMetrics(step_time_s=0.1, step_times_s=(0.1, 0.1), peak_mem_bytes=500,
                                            steady_mem_bytes=450, phases_s=(("forward", 0.04),)))


def test_a_record_round_trips_with_its_steady_memory() -> None:
    record = _record()
    assert TrialRecord.from_dict(record.to_dict()) == record


def test_a_version_1_record_reads_without_steady_memory() -> None:
    data = _record().to_dict()
    data["schema_version"] = 1
    for key in ("steady_mem_bytes", "device_steady_mem_bytes", "device_capacity_bytes", "device_peak_censored"):
        del data["metrics"][key]
    again = TrialRecord.from_dict(data)
    assert again.metrics.steady_mem_bytes is None and again.schema_version == TRIAL_SCHEMA_VERSION
    assert again.metrics.peak_mem_bytes == 500


def test_a_version_2_record_reads_without_gpu_memory() -> None:
    data = _record().to_dict()
    data["schema_version"] = 2
    for key in ("device_steady_mem_bytes", "device_capacity_bytes", "device_peak_censored"):
        del data["metrics"][key]
    again = TrialRecord.from_dict(data)
    assert again.metrics.device_capacity_bytes is None and not again.metrics.device_peak_censored
    assert again.metrics.steady_mem_bytes == 450 and again.schema_version == TRIAL_SCHEMA_VERSION


def test_a_record_from_a_newer_infrarsi_is_refused_by_name() -> None:
    data = {**_record().to_dict(), "schema_version": TRIAL_SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match="newer than this InfraRSI"):
        TrialRecord.from_dict(data)
