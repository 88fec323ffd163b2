"""run.json as a versioned record, and verdicts that read back what they wrote."""

from __future__ import annotations

import json
import math

import pytest

from infrarsi.run_summary import RUN_SUMMARY_VERSION, RunSummary, SearchTrial
from infrarsi.stats import compare
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord
from infrarsi.invariants import compared, not_checked
from infrarsi.verdict import Verdict, VerdictKind

BASE = (0.0120, 0.0124, 0.0119, 0.0122, 0.0121)
FAST = (0.0090, 0.0093, 0.0091, 0.0089, 0.0092)


def _verdict(kind: VerdictKind = VerdictKind.PROMOTED, times: tuple[float, ...] = FAST,
             knobs: dict | None = None) -> Verdict:
    comparison = compare(BASE, times, min_effect=0.01, alpha=0.05, n_boot=300, seed=1)
    return Verdict(kind=kind, reason=comparison.reason,
                   candidate=Candidate.of(knobs or {"dtype": "bf16", "micro_batch": 4, "compile": True,
                                                    "lr_scale": 0.5}, ("fused_gelu",)),
                   baseline_trials=(10, 12, 14, 16, 18), candidate_trials=(11, 13, 15, 17, 19),
                   baseline_step_s=BASE, candidate_step_s=times, comparison=comparison,
                   invariants=(compared("loss_band", True, "every step inside"),
                               not_checked("project_metadata", "the backend could not be installed")))


def _through_json(data: dict) -> dict:
    return json.loads(json.dumps(data, sort_keys=True))


def test_verdict_round_trips_through_json() -> None:
    for verdict in (_verdict(), _verdict(VerdictKind.NOT_SIGNIFICANT, times=BASE)):
        back = Verdict.from_dict(_through_json(verdict.to_dict()))
        assert back == verdict
        assert back.candidate.digest() == verdict.candidate.digest()
    bare = Verdict(kind=VerdictKind.INVALID, reason="outcome: crash", candidate=Candidate(), baseline_trials=(1,),
                   candidate_trials=(2,), baseline_step_s=(), candidate_step_s=(), comparison=None, invariants=())
    assert Verdict.from_dict(_through_json(bare.to_dict())) == bare


def test_an_old_verdict_is_upgraded_from_its_flat_figures() -> None:
    verdict = _verdict()
    old = _through_json(verdict.to_dict())
    for key in ("knobs", "patches", "comparison"):
        del old[key]
    back = Verdict.from_dict(old)
    assert back.candidate.describe() == verdict.candidate.describe()  # values kept as the text that was written
    assert back.speedup == verdict.speedup and back.promoted
    c, want = back.comparison, verdict.comparison
    assert c is not None and want is not None
    assert (c.ci_low, c.ci_high, c.ci_level, c.p_value) == (want.ci_low, want.ci_high, want.ci_level, want.p_value)
    assert c.median_baseline == want.median_baseline and math.isnan(c.u_statistic) and c.mwu_method == "unknown"
    assert math.isclose(c.alpha, 0.05) and c.significant


def _record(no: int, outcome: Outcome, *, cost: float, peak: int | None = None) -> TrialRecord:
    return TrialRecord(run_id="r", trial_no=no, candidate=Candidate.of({"micro_batch": no}), outcome=outcome,
                       cost_s=cost, commit=f"{no:040x}",
                       metrics=TrialMetrics(step_time_s=0.01 * no if outcome is Outcome.OK else None,
                                            peak_mem_bytes=peak, peak_mem_censored=outcome is Outcome.OOM))


def _summary() -> RunSummary:
    records = [_record(4, Outcome.OK, cost=2.0, peak=100), _record(5, Outcome.OOM, cost=1.5, peak=900),
               _record(6, Outcome.CRASH, cost=0.25)]
    slower = _verdict(knobs={"dtype": "fp32"}, times=(0.0110, 0.0112, 0.0109, 0.0111, 0.0110))
    return RunSummary(run_id="r", baseline_step_s=0.0121, trials=tuple(SearchTrial.of(r) for r in records),
                      verdicts=(slower, _verdict(), _verdict(VerdictKind.NOT_SIGNIFICANT, times=BASE,
                                                             knobs={"dtype": "fp16"})),
                      posterior={"time_effects": [{"feature": "dtype=bf16", "prior_mean": -0.5, "prior_sd": 0.3,
                                                   "post_mean": -0.3, "post_sd": 0.1}]},
                      llm={"tokens": 10})


def test_run_summary_round_trips_and_derives_best_failures_and_ooms() -> None:
    summary = _summary()
    data = _through_json(summary.to_dict())
    assert data["version"] == RUN_SUMMARY_VERSION == 3
    assert data["failed_cost_s"] == 1.75 and [o["trial_no"] for o in data["oom"]] == [5]
    assert data["oom"][0] == {"trial_no": 5, "candidate": "micro_batch=5", "cost_s": 1.5, "peak_mem_bytes": 900}
    assert data["best"]["candidate"] == "compile=True dtype=bf16 lr_scale=0.5 micro_batch=4 +fused_gelu"
    back = RunSummary.from_dict(data)
    assert back == summary
    assert back.best == summary.verdicts[1]


def test_an_old_run_json_without_a_version_is_upgraded_on_read() -> None:
    data = _through_json(_summary().to_dict())
    del data["version"]
    for trial in data["trials"]:  # the oldest writers kept fewer figures per trial
        del trial["peak_mem_bytes"], trial["peak_mem_censored"]
    for verdict in data["verdicts"] + [data["best"]]:
        del verdict["knobs"], verdict["patches"], verdict["comparison"]
    back = RunSummary.from_dict(data)
    assert back.version == RUN_SUMMARY_VERSION and back.run_id == "r" and len(back.trials) == 3
    assert back.trials[1].peak_mem_bytes is None and back.failed_cost_s == 1.75
    assert back.best is not None and back.best.candidate.describe() == data["best"]["candidate"]
    assert back.posterior == data["posterior"] and back.llm == {"tokens": 10}


def test_a_run_json_from_a_newer_infrarsi_is_refused() -> None:
    data = _summary().to_dict() | {"version": RUN_SUMMARY_VERSION + 1}
    with pytest.raises(ValueError, match="newer than this InfraRSI reads"):
        RunSummary.from_dict(data)
