"""``infrarsi verify``: interleave baseline and candidate from fresh processes and judge the candidate.

A B, B A, A B … (counterbalanced), each run its own process (and, in a git repo, its own worktree
and commit), so slow drift of the machine hits both arms alike. The number of
pairs comes from the doctor's noise calibration, and verification stops early
(:mod:`infrarsi.stats.sequential`): for efficacy as soon as a speedup is clear,
for futility as soon as one above ``verify.min_effect`` has become unlikely,
with the false-promotion rate still at most alpha. An explicit ``pairs`` runs
exactly that many (the fixed design). A candidate trial that breaks an
invariant ends verification at once: more runs cannot make it valid.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path

from bot.stages.run.candidate import TrialContext
from bot.stages.doctor.project_metadata import project_metadata
from bot.workspace.trees import export_tree
from infrarsi.contract.model import Contract
from infrarsi.doctor import DoctorReport
from infrarsi.stats.sequential import LookResult, SequentialPlan, look, plan_sequential
from infrarsi.trial import Candidate, Outcome, TrialRecord
from infrarsi.verify import InvariantCheck, Verdict, VerdictKind, VerifyPolicy, judge, trial_invariants


def metadata_check(repo: Path, commit: str | None) -> InvariantCheck | None:
    """A patched pyproject-based project must still prepare its metadata through its own backend."""
    if commit is None or not (repo / "pyproject.toml").is_file():
        return None
    with tempfile.TemporaryDirectory(prefix="infrarsi-meta-") as tmp:
        export_tree(repo, commit, Path(tmp))
        meta = project_metadata(Path(tmp))
    if meta is None:
        return None
    return InvariantCheck(name="project_metadata", ok=meta.ok,
                          detail=f"candidate commit {commit[:10]}: " + (
                              f"{meta.name} {meta.version} prepares its metadata" if meta.ok else meta.error))


def splits_batch_as_baseline(contract: Contract, candidate: Candidate) -> bool:
    """Whether ``candidate`` keeps every knob of a coupled micro-batch pair (a ``product`` constraint) at its
    default: only then is the job's printed loss comparable with the baseline's (infrarsi.verify.trial_invariants)."""
    coupled = {name for c in contract.constraints if c.kind == "product" for name in c.knobs}
    values = candidate.knob_dict()
    return all(values.get(k.name, k.default) == k.default for k in contract.knobs if k.name in coupled)


def plausibility_ceiling(peaks: dict[str, float]) -> float | None:
    """The fastest matmul rate this device reached in any dtype: no candidate computes faster. Not the bf16
    peak as such: a CPU without AVX-512 bf16 emulates bf16 at 1/15-1/250 of fp32's rate, and an fp32
    candidate would then look impossible (hydrajob's compiled 2.6x was quarantined so)."""
    return max(peaks.values(), default=None)


def candidate_first(pair: int) -> bool:
    """A B, B A, A B, B A …: counterbalanced, so a steady drift of the machine (warming caches, a
    throttling GPU) adds as much to one arm as to the other instead of always favouring the later run."""
    return pair % 2 == 1


def verify_candidate(ctx: TrialContext, *, run_id: str, candidate: Candidate, doctor: DoctorReport,
                     pairs: int | None = None, progress: Callable[[str], None] = lambda _: None) -> Verdict:
    """Interleaved A/B pairs until the sequential plan decides (or exactly ``pairs`` when given), and the verdict."""
    contract = ctx.contract
    plan = None if pairs else plan_sequential(doctor.verify_pairs, alpha=contract.verify.alpha,
                                              min_effect=contract.verify.min_effect, sigma_log=doctor.sigma_log)
    n = plan.looks[-1] if plan is not None else (pairs or doctor.verify_pairs)
    baseline = Candidate.of(contract.defaults())
    printed_loss = splits_batch_as_baseline(contract, candidate)
    policy = VerifyPolicy(min_effect=contract.verify.min_effect, alpha=contract.verify.alpha,
                          max_speedup=contract.verify.max_speedup)
    base_runs: list[TrialRecord] = []
    cand_runs: list[TrialRecord] = []
    stop = "fixed" if plan is None else "max_pairs"
    last_look: LookResult | None = None
    extra: list[InvariantCheck] = []

    def run_baseline(i: int) -> None:
        progress(f"pair {i + 1}/{n}: baseline")
        base_runs.append(ctx.run(run_id, baseline, witness=True))

    for i in range(n):
        if not candidate_first(i):
            run_baseline(i)
        progress(f"pair {i + 1}/{n}: candidate")
        record = ctx.run(run_id, candidate, witness=True)
        cand_runs.append(record)
        broken = [c for c in trial_invariants(record, doctor.loss_band, doctor.work, printed_loss=printed_loss)
                  if not c.ok]
        if i == 0 and record.outcome is Outcome.OK and candidate.patches:
            check = metadata_check(ctx.repo, record.commit)
            if check is not None:
                extra.append(check)
                if not check.ok:
                    broken.append(check)
        if broken:
            progress(f"invariant broken: {broken[0].detail}")
            stop = "invariant"
            break
        if candidate_first(i):
            run_baseline(i)
        decided = _look(plan, base_runs, cand_runs)
        if decided is not None:
            last_look = decided
            if decided.stop != "continue":
                progress(decided.reason)
                stop = decided.stop
                break
    peak = plausibility_ceiling(doctor.peak_flops)
    verdict = judge(base_runs, cand_runs, band=doctor.loss_band, policy=policy, peak_flops=peak,
                    model_flops_per_step=doctor.model_flops_per_step, reference=doctor.work,
                    printed_loss=printed_loss)
    verdict = replace(verdict, pairs=len(cand_runs), stop=stop)
    if plan is not None and verdict.promoted and (last_look is None or last_look.stop != "efficacy"):
        # The plan's levels, not the fixed design's alpha, decide a sequential verification: a final p-value
        # between the last look's level and alpha is not a promotion, or the A/A rate would exceed alpha.
        why = last_look.reason if last_look is not None else "the runs never reached one of the plan's looks"
        verdict = replace(verdict, kind=VerdictKind.NOT_SIGNIFICANT, reason=why)
    elif plan is not None and last_look is not None and verdict.kind is VerdictKind.NOT_SIGNIFICANT:
        verdict = replace(verdict, reason=last_look.reason)  # says why it stopped and at how many pairs
    if not extra:
        return verdict
    verdict = replace(verdict, invariants=verdict.invariants + tuple(extra))
    failed = next((c for c in extra if not c.ok), None)
    if failed is not None and verdict.kind is not VerdictKind.INVALID:
        verdict = replace(verdict, kind=VerdictKind.INVALID, reason=f"{failed.name}: {failed.detail}")
    return verdict


def _look(plan: SequentialPlan | None, base_runs: list[TrialRecord], cand_runs: list[TrialRecord]) -> LookResult | None:
    """The plan's decision when both arms hold exactly one of its looks of good runs; None between looks."""
    if plan is None:
        return None
    base = [r.metrics.step_time_s for r in base_runs if r.outcome is Outcome.OK and r.metrics.step_time_s]
    cand = [r.metrics.step_time_s for r in cand_runs if r.outcome is Outcome.OK and r.metrics.step_time_s]
    if len(base) != len(cand) or len(base) not in plan.looks:
        return None
    return look(plan, base, cand)
