"""Synthetic witnessed trials: a witness report, the baseline's reference built from it, and a trial record
carrying it, as verification sees them (the real witness is exercised in test_witness and the red team)."""

from __future__ import annotations

from dataclasses import replace

from infrarsi.invariants import WorkReference
from infrarsi.loss_band import LossBand
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord
from infrarsi.verdict import Reference
from infrarsi.witness import WitnessReport

SHA = "ab" * 32


#: The optimizer the synthetic job steps, as the witness records it (infrarsi.witnessed_settings).
ADAMW = {"amsgrad": False, "betas": [0.9, 0.95], "eps": 1e-8, "lr": 6e-4, "maximize": False, "weight_decay": 0.1}
OPTIMIZER = {"family": "AdamW", "timeline": [[1, [ADAMW]]], "members": [[[10, 20], [10, 10], [0]]],
             "members_at_end": [[[10, 20], [10, 10], [0]]], "state_dtypes": {"exp_avg": ["float32"]}}
MATH = {"float32_matmul_precision": "highest", "cuda.matmul.allow_tf32": False, "default_dtype": "float32"}


def report(**changes: object) -> WitnessReport:
    base = WitnessReport(optimizer_steps=7, count_step=2, flops=1_000_000_000,
                         flops_by_op=(("aten.addmm", 400_000_000), ("aten.mm", 600_000_000)),
                         matmul_dtypes=("float32",), counted_s=0.1, params=3, param_elements=300,
                         grad_norms=(1.0, 0.5, 0.01), weight_norms=(10.0, 5.0, 1.0),
                         update_proj=(0.2, -0.1, 0.05), tampered=(), source_sha256=SHA, tokens_in=128,
                         optimizer=(OPTIMIZER,), math=((1, MATH),),
                         update_projs=((0.2, 0.3, -0.1), (-0.1, 0.05, 0.2), (0.05, -0.02, 0.01)))
    return replace(base, **changes)  # type: ignore[arg-type]


def work_reference(first_loss: float = 5.0, **changes: object) -> WorkReference:
    one = report(**changes)
    return WorkReference(reports=(one, one), first_loss=(first_loss, first_loss), allowed_dtypes=("float32",))


def reference(band: LossBand | None, **changes: object) -> Reference:
    return Reference(work=work_reference(**changes), band=band)


def trial(no: int, step: float, *, cand: Candidate, loss: tuple[float, ...], outcome: Outcome = Outcome.OK,
          reason: str = "", child: float | None = None, witness: WitnessReport | None = None,
          witnessed: bool = True, lock_checked: bool = True, tokens: int | None = 128,
          executor: str = "local", skipped: str | None = None, first_loss: float | None = 5.0) -> TrialRecord:
    """A finished trial: a warm-up step with ``first_loss`` and six measured steps around ``step`` s, witnessed
    with ``witness`` (default: the baseline's report) unless ``witnessed`` is False, the lock checked where it
    ran."""
    times = tuple(step * f for f in (1.0, 1.01, 0.99, 1.0, 1.02, 0.98))
    seen = (witness or report()) if witnessed else None
    return TrialRecord(run_id="r", trial_no=no, candidate=cand, outcome=outcome, reason=reason, executor=executor,
                       metrics=TrialMetrics(step_time_s=step, step_time_cv=0.01, step_times_s=times,
                                            tokens_per_step=tokens, loss=loss, warmup_loss=(first_loss,) if first_loss is not None else (),
                                            wall_s=sum(times) + 2.0, steps_seen=7,
                                            child_step_time_s=step if child is None else child,
                                            witness=seen.to_dict() if seen else None, witness_skipped=skipped,
                                            lock_checked=lock_checked))
