"""Records built in memory for the report and doctor tests: a finished run's report, a doctor report with its
witnessed FLOP count."""

from __future__ import annotations

from pathlib import Path

from infrarsi.contract.model import Contract, Knob, Workload
from infrarsi.doctor import build_report as build_doctor
from infrarsi.invariants import WorkReference
from infrarsi.report import Report, TrialRow
from infrarsi.report.model import (
    CalibrationRow,
    Invariant,
    KnobChange,
    PatchChange,
    SourceChange,
    Verification,
)
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord
from infrarsi.witness import WitnessReport


def sample_report(failed: int = 3, **changes: object) -> Report:
    trials = [TrialRow(trial_no=i, candidate="dtype=bf16 micro_batch=16", outcome="oom" if i % 2 else "crash",
                       reason="x" * 150, step_time_s=None, peak_mem_bytes=2**30, cost_s=4.0, stage="search")
              for i in range(1, failed + 1)]
    trials.append(TrialRow(trial_no=failed + 1, candidate="dtype=bf16", outcome="ok", reason="", step_time_s=0.01,
                           peak_mem_bytes=2**29, cost_s=3.0, stage="search"))
    fields: dict[str, object] = dict(
        run_id="r7", repo="tinygpt", created_at=0.0, base_commit="a" * 40, hardware={"cpu_model": "EPYC"},
        promoted=True, speedup=1.5, speedup_ci=(1.3, 1.7), ci_level=0.9, p_value=0.01, step_time_before_s=0.015,
        step_time_after_s=0.01, mfu_before=0.1, mfu_after=0.15, peak_mem_before_bytes=2**29,
        peak_mem_after_bytes=2**28, winner="dtype=bf16 +fused_gelu", winner_digest="d" * 16,
        winner_knobs={"dtype": "bf16"}, winner_patches=("fused_gelu",), winner_commit="b" * 40,
        winner_branch="infrarsi/r7/9", diff_link=".infrarsi/runs/r7/winner.diff",
        knob_changes=(KnobChange(name="dtype", old="fp32", new="bf16", where="--dtype flag of train.py"),),
        patches=(PatchChange(patch_id="fused_gelu", sources=(SourceChange(
            path="model.py", symbol="gelu_tanh", line_start=10, line_end=14, lines_added=1, lines_removed=3),)),),
        verification=Verification(verdict="promoted", reason="significant", candidate="dtype=bf16 +fused_gelu",
                                  baseline_step_s=(0.015, 0.016), candidate_step_s=(0.01, 0.011),
                                  baseline_trials=(10, 12), candidate_trials=(11, 13), p_value=0.01, ci=(1.3, 1.7),
                                  ci_level=0.9, test="Mann-Whitney U", speedup=1.5,
                                  invariants=(Invariant(name="loss_band", ok=True, detail="inside"),)),
        trials=tuple(trials), failed_cost_s=4.0 * failed, total_cost_s=4.0 * failed + 3,
        oom=tuple(t for t in trials if t.outcome == "oom"),
        calibration=(CalibrationRow(effect="dtype=bf16", prior_ratio=0.6, prior_sd=0.3, posterior_ratio=0.75,
                                    posterior_sd=0.1, in_winner=True),),
        reproduce={"baseline": "python train.py --dtype fp32", "candidate": "python train.py --dtype bf16"},
        llm={"tokens": 1200, "cost_usd": 0.03})
    fields.update(changes)
    return Report(**fields)  # type: ignore[arg-type]


FLOPS = 3_000_000_000


def witness(dtypes: tuple[str, ...] = ("float32",), flops: int = FLOPS) -> dict:
    return {"optimizer_steps": 8, "count_step": 2, "flops": flops, "flops_by_op": {"aten.mm": flops},
            "matmul_dtypes": list(dtypes), "counted_s": 0.1, "params": 4, "param_elements": 1000,
            "grad_norms": [1.0] * 4, "weight_norms": [1.0] * 4, "update_proj": [0.1] * 4, "tampered": [],
            "source_sha256": "x"}


def mfu_record(no: int, step_s: float, candidate: Candidate = Candidate.of({"dtype": "fp32"}),
            dtypes: tuple[str, ...] = ("float32",)) -> TrialRecord:
    return TrialRecord(run_id="r", trial_no=no, candidate=candidate, outcome=Outcome.OK, metrics=TrialMetrics(
        step_time_s=step_s, step_times_s=(step_s,) * 6, loss=(2.0,) * 6, peak_mem_bytes=2**28, parameters=1000,
        witness=witness(dtypes)))


def sample_doctor(peaks: dict[str, float], step_s: float = 0.1):  # noqa: ANN202
    contract = Contract(source=Path("infrarsi.toml"), root=Path("."),
                        workload=Workload(command=("python", "train.py"), tokens_per_step=128),
                        knobs=(Knob(name="dtype", kind="categorical", default="fp32", values=("fp32", "bf16"),
                                    flag="--dtype"),))
    records = [mfu_record(i, step_s) for i in (1, 2, 3)]
    work = WorkReference(reports=(WitnessReport.from_dict(witness()),), first_loss=(2.0,),
                         allowed_dtypes=("bfloat16", "float32"))
    return build_doctor(contract, records, run_id="r", created_at=0.0, peak_flops=peaks, peak_flops_method="test",
                        fingerprint={"gpu_model": "NVIDIA H100 80GB HBM3"}, work=work)
