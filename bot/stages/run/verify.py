"""``infrarsi verify``: interleave baseline and candidate from fresh processes and judge the candidate.

A B, B A, A B … (counterbalanced), each run its own process (and, in a git repo, its own worktree
and commit), so slow drift of the machine hits both arms alike. The number of
pairs comes from the doctor's noise calibration, and verification stops early
(:mod:`infrarsi.stats.sequential`): for efficacy as soon as a speedup is clear,
for futility as soon as one above ``verify.min_effect`` has become unlikely,
with the false-promotion rate still at most alpha. An explicit ``pairs`` runs
exactly that many (the fixed design); ``verify.max_pairs`` caps both. A
candidate trial that breaks an invariant ends verification at once: more runs
cannot make it valid. A run disturbed from outside (the host's CPU pressure,
steal, or a process tree starved of CPU: :mod:`infrarsi.disturbance`) is run
again rather than counted, and the verdict lists it; a machine that stays busy
past the re-runs and a bounded wait for quiet ends the verification
``inconclusive`` — resumable, never a negative result (:mod:`infrarsi.quiet`).
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bot.stages.run.candidate import TrialContext
from bot.stages.doctor.project_metadata import project_metadata
from infrarsi.quiet import DisturbanceGuard, MachineBusy, QuietWait
from bot.stages.run.references import References
from infrarsi.doctor import DoctorReport
from infrarsi.invariants import InvariantCheck, compared, not_checked, witnessed_report
from infrarsi.past_window import draw_extra_lines, past_window_row
from infrarsi.seams.workspace import Workspace
from infrarsi.stats.sequential import LookResult, SequentialPlan, look, plan_sequential
from infrarsi.trial_record import Candidate, Outcome, TrialRecord
from infrarsi.verdict import Verdict, VerdictKind, VerifyPolicy, excuse_from_baselines, judge, trial_invariants


def metadata_check(repo: Path, commit: str | None, base: Mapping[str, Any] | None, *,
                   workspace: Workspace | None) -> InvariantCheck | None:
    """A patched pyproject-based project must still prepare its metadata through its own backend, in an isolated
    build environment as pip would. Broken only when the base prepares it and the candidate does not; when the
    bot cannot run the backend (it cannot be installed, the base fails too) the row is not checked, and the
    candidate is not blamed. ``commit`` is read through ``workspace`` (None: not a git repo, so no commit)."""
    if commit is None or workspace is None or not (repo / "pyproject.toml").is_file():
        return None
    with tempfile.TemporaryDirectory(prefix="infrarsi-meta-") as tmp:
        workspace.export_tree(commit, Path(tmp))
        meta = project_metadata(Path(tmp))
    if meta is None:
        return None
    where = f"candidate commit {commit[:10]}"
    if meta.ok:
        return compared("project_metadata", True, f"{where}: {meta.name} {meta.version} prepares its metadata")
    if not meta.checked:
        return not_checked("project_metadata", f"{where}: the build backend could not be run: {meta.error}")
    if base is None or not base.get("ok"):
        why = (base or {}).get("error") or "the doctor did not read the base's metadata"
        return not_checked("project_metadata", f"{where}: {meta.error}; the base fails too ({why}), so the "
                           "candidate is not blamed")
    return compared("project_metadata", False, f"{where}: {meta.error} (the base prepares its metadata)")


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
                     pairs: int | None = None, progress: Callable[[str], None] = lambda _: None,
                     references: References | None = None, resume: Verdict | None = None,
                     quiet: QuietWait | None = None, first_baseline: TrialRecord | None = None) -> Verdict:
    """Interleaved A/B pairs until the sequential plan decides (or exactly ``pairs`` when given), and the verdict.

    Every candidate trial is held to the baseline's witnessed reference at the candidate's own split of the
    global batch (:mod:`bot.stages.run.references`; ``references`` keeps the split baselines of a run). A run
    disturbed from outside is run again (:mod:`infrarsi.quiet`); when the machine stays busy past the
    re-runs and the wait, the verdict is ``inconclusive``. ``resume``: an inconclusive verdict of the same
    candidate in the same run, whose counted runs are kept and whose pairs go on from where it stopped.
    ``first_baseline``: a witnessed baseline run made just before (the search's last control, or the previous
    verification's last run), counted as the first pair's baseline instead of running another."""
    contract = ctx.contract
    plan = None if pairs else plan_sequential(doctor.verify_pairs, alpha=contract.verify.alpha,
                                              min_effect=contract.verify.min_effect, sigma_log=doctor.sigma_log,
                                              max_pairs=contract.verify.max_pairs)
    n = plan.looks[-1] if plan is not None else min(pairs or doctor.verify_pairs, contract.verify.max_pairs)
    baseline = Candidate.of(contract.defaults())
    policy = VerifyPolicy(min_effect=contract.verify.min_effect, alpha=contract.verify.alpha,
                          max_speedup=contract.verify.max_speedup, waive=contract.verify.waive)
    references = references or References(ctx=ctx, run_id=run_id, doctor=doctor, progress=progress)
    reference, extra = references.for_candidate(candidate)
    extra = list(extra)
    base_runs, cand_runs, earlier = _resumed(ctx, run_id, resume, candidate)
    shared = first_baseline is not None and not base_runs and not cand_runs
    if shared:
        base_runs.append(first_baseline)  # type: ignore[arg-type]
        progress(f"pair 1: baseline: trial {first_baseline.trial_no}, run just before, counted (not run again)")  # type: ignore[union-attr]
    stop = "fixed" if plan is None else "max_pairs"
    last_look: LookResult | None = None
    broken = [c for c in extra if c.broken]
    if broken:
        progress(f"invariant broken: {broken[0].detail}")
        n, stop = 0, "invariant"
    if cand_runs or base_runs:
        progress(f"resuming the inconclusive verification: {len(cand_runs)} candidate and {len(base_runs)} baseline "
                 "runs kept")

    quiet = quiet or QuietWait(budget_s=contract.verify.quiet_wait_s, progress=progress, busy=ctx.executor.host_busy)
    quiet.calibrate()
    guard = DisturbanceGuard(rerun_budget=max(2, n // 2), wait=quiet, progress=progress,
                             reruns=list(earlier.reruns) if earlier else [],
                             disturbed=list(earlier.disturbed) if earlier else [])
    doctor_runs = [r for r in ctx.journal.trials(run_id) if r.trial_no in set(doctor.trials)]

    def undisturbed_run(arm: str, i: int) -> TrialRecord:
        """One run of ``arm`` that nothing outside disturbed: against the same arm's undisturbed runs (or, for
        the candidate's first, the baseline's, whose CPU use says nothing of the candidate's)."""
        what = baseline if arm == "baseline" else candidate
        past = extra_lines if i == look else 0

        def launch() -> TrialRecord:
            progress(f"pair {i + 1}/{n}: {arm}" + (f" (on {past} step lines past the window)" if past else ""))
            return ctx.run(run_id, what, witness=True, past_window=past)

        def own() -> list[TrialRecord]:
            return [r for r in (base_runs if arm == "baseline" else cand_runs) if r.trial_no not in guard.reruns]

        return guard.run(launch, lambda: own() or base_runs or doctor_runs,
                         same_arm=lambda: bool(own()) or arm == "baseline")

    # the first pair of fresh runs goes on past the window, to a step drawn now: what a patch does after the steps
    # it knows are looked at is compared too (infrarsi/past_window.py)
    extra_lines = draw_extra_lines(contract.timing.measured_steps)
    timing = contract.timing
    window_end = (timing.warmup_steps + timing.measured_steps) * max(1, timing.steps_per_line)
    look = 1 if shared or _looked_later(base_runs, cand_runs, window_end) else 0
    if len(base_runs) > look and len(cand_runs) > look:  # resumed after that pair: its look is read back
        extra.append(past_window_row(base_runs[look], cand_runs[look], reference=reference.work,
                                     window_end=window_end, moved=reference.moved,
                                     resplit=bool(reference.split)))
    busy: str | None = None
    try:
        for i in range(min(len(base_runs), len(cand_runs)), n):
            for arm in (("candidate", "baseline") if candidate_first(i) else ("baseline", "candidate")):
                runs = cand_runs if arm == "candidate" else base_runs
                if len(runs) > i:
                    continue  # run before an inconclusive stop: kept
                record = undisturbed_run(arm, i)
                runs.append(record)
                if arm == "baseline":
                    continue
                broken = [c for c in trial_invariants(record, reference) if c.broken]
                excusing = excuse_from_baselines(broken, [r for r in base_runs if r is not None], reference)
                if excusing is not reference:
                    progress("not checked from here on (the baseline's own runs fail it too): "
                             + ", ".join(n for n, _ in excusing.baseline_fails[len(reference.baseline_fails):]))
                    reference = excusing
                    broken = [c for c in trial_invariants(record, reference) if c.broken]
                if i == 0 and record.outcome is Outcome.OK and candidate.patches:
                    check = metadata_check(ctx.repo, record.commit, (doctor.fingerprint or {}).get("project"),
                                           workspace=ctx.workspace)
                    if check is not None:
                        extra.append(check)
                        broken += [check] if check.broken else []
                if broken:
                    progress(f"invariant broken: {broken[0].detail}")
                    stop = "invariant"
                    break
            if stop == "invariant":
                break
            if i == look and not any(c.name == "past_window" for c in extra):
                row = past_window_row(base_runs[look], cand_runs[look], reference=reference.work,
                                      window_end=window_end, moved=reference.moved,
                                     resplit=bool(reference.split))
                extra.append(row)
                if row.broken:
                    progress(f"invariant broken: {row.detail}")
                    stop = "invariant"
                    break
            decided = _look(plan, base_runs, cand_runs)
            if decided is not None:
                last_look = decided
                if decided.stop != "continue":
                    progress(decided.reason)
                    stop = decided.stop
                    break
    except MachineBusy as exc:
        busy, stop = str(exc), "inconclusive"
        progress(f"inconclusive: {busy}")
    peak = plausibility_ceiling(doctor.peak_flops)
    verdict = judge(base_runs, cand_runs, reference=reference, policy=policy, peak_flops=peak,
                    model_flops_per_step=doctor.model_flops_per_step, extra=extra)
    verdict = replace(verdict, pairs=len(cand_runs), stop=stop, reruns=tuple(guard.reruns),
                      disturbed=tuple(guard.disturbed), waited_s=quiet.waited_s + (earlier.waited_s if earlier else 0))
    if busy is not None and verdict.kind is not VerdictKind.INVALID:
        # Nothing the load decided is a verdict: not "not significant", not a promotion read off disturbed pairs.
        return replace(verdict, kind=VerdictKind.INCONCLUSIVE,
                       reason=f"{busy}; {len(cand_runs)} pair(s) counted so far. Resume it when the machine is "
                              "quiet (`infrarsi verify` with the same candidate and run, or `infrarsi promote`)")
    if plan is not None and verdict.promoted and (last_look is None or last_look.stop != "efficacy"):
        # The plan's levels, not the fixed design's alpha, decide a sequential verification: a final p-value
        # between the last look's level and alpha is not a promotion, or the A/A rate would exceed alpha.
        why = last_look.reason if last_look is not None else "the runs never reached one of the plan's looks"
        verdict = replace(verdict, kind=VerdictKind.NOT_SIGNIFICANT, reason=why)
    elif plan is not None and last_look is not None and verdict.kind is VerdictKind.NOT_SIGNIFICANT:
        verdict = replace(verdict, reason=last_look.reason)  # says why it stopped and at how many pairs
    return verdict


def _looked_later(base_runs: list[TrialRecord], cand_runs: list[TrialRecord], window_end: int) -> bool:
    """Whether a resumed verification's first pair was a shared baseline and its second the look past the window:
    the second pair's baseline run went on past the window, the first's did not."""
    def past(r: TrialRecord) -> bool:
        report = witnessed_report(r)
        return report is not None and report.optimizer_steps > window_end
    return len(base_runs) > 1 and len(cand_runs) > 1 and past(base_runs[1]) and not past(base_runs[0])


def _resumed(ctx: TrialContext, run_id: str, resume: Verdict | None,
             candidate: Candidate) -> tuple[list[TrialRecord], list[TrialRecord], Verdict | None]:
    """The counted runs of an inconclusive verdict of ``candidate``, read back from the journal."""
    if resume is None or resume.kind is not VerdictKind.INCONCLUSIVE or resume.candidate.digest() != candidate.digest():
        return [], [], None
    by_no = {r.trial_no: r for r in ctx.journal.trials(run_id)}
    base = [by_no[t] for t in resume.baseline_trials if t in by_no and t not in resume.reruns]
    cand = [by_no[t] for t in resume.candidate_trials if t in by_no and t not in resume.reruns]
    return base, cand, resume


def _look(plan: SequentialPlan | None, base_runs: list[TrialRecord], cand_runs: list[TrialRecord]) -> LookResult | None:
    """The plan's decision when both arms hold exactly one of its looks of good runs; None between looks."""
    if plan is None:
        return None
    base = [r.metrics.step_time_s for r in base_runs if r.outcome is Outcome.OK and r.metrics.step_time_s]
    cand = [r.metrics.step_time_s for r in cand_runs if r.outcome is Outcome.OK and r.metrics.step_time_s]
    if len(base) != len(cand) or len(base) not in plan.looks:
        return None
    return look(plan, base, cand)
