"""``infrarsi run``: doctor, diverse start, model-guided batches until the budget, then verification.

Everything the loop knows is rebuilt from the journal, so ``--resume`` after a
kill (SIGKILL included) continues without repeating a finished trial: the
interrupted one is recorded as ``interrupted`` with its cost, the models are
refitted from every record, and the proposals continue from there.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infrarsi.search.blame import Judgements
from bot.patching.screen import Screening, screen_patches
from bot.stages.run.candidate import TrialContext
from bot.stages.doctor.baseline import load_doctor, run_doctor
from infrarsi.search.design_columns import derived_features
from infrarsi.parallel.launcher_checks import launcher_constraints
from infrarsi.parallel.roles import fixed_global_batch
from infrarsi.search.builtin_priors import builtin_priors
from bot.stages.run.references import References
from bot.stages.run.search_loop import SearchLoop, blame, screened, vindicates
from bot.stages.run.verify import verify_candidate
from infrarsi.bank import Bank, Finding, FindingOutcome, as_pairs, hardware_fingerprint, workload_fingerprint
from infrarsi.bank import Effect as BankEffect
from infrarsi.contract.model import Contract
from infrarsi.doctor import DoctorReport, windowed
from infrarsi.dtype_levers import for_doctor, precision_exclusions
from infrarsi.journal import Journal
from infrarsi.rundir import RunDir, write_json
from infrarsi.run_summary import RunSummary, SearchTrial
from infrarsi.search.acquisition import Proposal
from infrarsi.search.drift import ControlSchedule, Drift
from infrarsi.search.engine import SearchEngine
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import QUARANTINED, Candidate, Outcome, TrialRecord, median_bytes
from infrarsi.patches import PatchSpec
from infrarsi.verdict import Reference, Verdict, VerdictKind, trial_invariants

Progress = Callable[[dict[str, Any]], None]
#: The verdicts that are experience: what a verification found about the candidate.
STORED_VERDICTS = frozenset({"promoted", "not_significant", "invalid", "quarantined"})


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    budget_trials: int
    budget_seconds: float | None = None
    parallel: int = 1
    initial: int = 8
    seed: int = 0
    stop_early: bool = True
    repeats: int = 5  # doctor repeats when the run has no doctor report yet
    proposer: Any = None  # an infrarsi.seams.proposer.Proposer: priors at the start, patches between batches
    proposal_rounds: int = 3  # rounds of patch proposals at most (each one model call for the LLM proposer)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResult:
    run_id: str
    doctor: DoctorReport
    search: tuple[TrialRecord, ...]
    verdicts: tuple[Verdict, ...]
    path: Path
    llm: Mapping[str, Any] | None = None  # the proposer's cost and proposals (run.json `llm`)
    drift: Drift | None = None  # the machine's speed over the search, from the controls
    controls: tuple[TrialRecord, ...] = ()  # the baseline re-run between search trials
    superseded: frozenset[int] = frozenset()  # search trials measured again after the machine's speed changed

    @property
    def best(self) -> Verdict | None:
        promoted = [v for v in self.verdicts if v.promoted]
        return max(promoted, key=lambda v: v.speedup or 0.0) if promoted else None


def recover_interrupted(journal: Journal, run_id: str, candidates: dict[str, Candidate], timeout_s: float) -> int:
    """Record every trial whose bot died mid-run as ``interrupted``; returns how many."""
    count = 0
    for pending in journal.orphaned(run_id):
        candidate = candidates.get(pending.candidate_hash, Candidate())
        cost = min(max(0.0, time.time() - pending.started_at), timeout_s)
        journal.mark_interrupted(pending, candidate, cost_s=cost)
        count += 1
    return count


def _geo_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def top_candidates(records: list[TrialRecord], k: int, baseline: Candidate) -> list[tuple[Candidate, float]]:
    """The k fastest distinct candidates that ran ok, by their own measurements (baseline excluded)."""
    times: dict[str, tuple[Candidate, list[float]]] = {}
    for r in records:
        if r.outcome is Outcome.OK and r.metrics.step_time_s and r.candidate.digest() != baseline.digest():
            times.setdefault(r.candidate.digest(), (r.candidate, []))[1].append(r.metrics.step_time_s)
    ranked = sorted(((_geo_mean(ts), c) for c, ts in times.values()), key=lambda x: x[0])
    return [(c, t) for t, c in ranked[:k]]


def _emit(progress: Progress, **event: Any) -> None:
    progress(event)


def run_search(ctx: TrialContext, *, run_id: str, options: RunOptions, progress: Progress,
               bank: Bank | None = None) -> RunResult:
    """The run in its phases: the doctor (if the run has none), the diverse first batch, the model-guided batches
    until the budget or the stop rule, then verification of the candidates that can still change the outcome."""
    loop = _begin(ctx, run_id=run_id, options=options, progress=progress, bank=bank)
    bank_candidates = bank_seeds(bank, ctx.contract, loop.doctor) if bank is not None else []
    if bank_candidates:
        _emit(progress, event="bank", message=f"{len(bank_candidates)} configuration(s) from the experience bank")
    resumed_verification = _search_state(loop.state_path).get("verification_from") is not None \
        if loop.state_path is not None else False
    if not resumed_verification:
        _emit(progress, event="stage", stage="search",
              message=f"search: {options.budget_trials} trials, resuming after {len(loop.settled())}" if loop.search
              else f"search: {options.budget_trials} trials")
        if _first_batch(loop, options, bank_candidates):
            _guided_batches(loop, options)
        if loop.search and loop.schedule is not None and loop.schedule.since > 0:
            loop.control(_worth_measuring_again)  # the last trials get a control after them too: each is read between two
        loop.save(verification_from=_next_trial_no(loop.ctx.journal, run_id))
    verdicts = _verify_top(loop.ctx, run_id=run_id, doctor=loop.doctor, search=[loop.drift.adjusted(r)  # type: ignore[union-attr]
                                                                                for r in loop.settled()],
                           baseline=loop.baseline, progress=progress, judged=loop.judged, session=loop.session,
                           space=loop.space, first_baseline=_last_control(loop))
    return _finish(loop, verdicts, bank)


def _begin(ctx: TrialContext, *, run_id: str, options: RunOptions, progress: Progress,
           bank: Bank | None) -> SearchLoop:
    """The doctor, the patches screened, the space and its engine, and — on ``--resume`` — everything the journal
    says the run already did (interrupted trials recorded, a scheduler's jobs read back, patches judged)."""
    del bank
    contract = ctx.contract
    journal = ctx.journal
    journal.ensure_run(run_id, kind="run", base_commit=ctx.base)
    doctor = load_doctor(contract.root, run_id)
    if doctor is None:
        _emit(progress, event="stage", stage="doctor", message=f"doctor: up to {options.repeats} baseline runs")
        doctor, _ = run_doctor(ctx, run_id=run_id, repeats=options.repeats,
                               progress=lambda m: _emit(progress, event="doctor", message=m))
    ctx = replace(ctx, contract=windowed(contract, doctor))  # the measured window the doctor sized
    if doctor.window_note:
        _emit(progress, event="doctor", message=doctor.window_note)
    session = None
    if options.proposer is not None:
        from bot.proposers.session import ProposerSession

        session = ProposerSession(proposer=options.proposer, journal=journal, run_id=run_id,
                                  run_dir=RunDir(contract.root, run_id).path, max_rounds=options.proposal_rounds)
        ctx = replace(ctx, patches={**ctx.patches, **{p.id: p for p in session.load()}})
    # Every patch is applied alone to the base and audited now: a rejected one never enters the space, and
    # patches that change the same symbol are never stacked (bot/patching/screen.py).
    screening = screened(ctx, list(ctx.patches.values()), session, progress)
    if screening is not None:
        ctx = replace(ctx, patches={p.id: p for p in screening.accepted})
    judged = Judgements()
    if session is not None:  # a resumed run: what an earlier process judged invalid stays judged
        judged.patches.update({pid: why.partition(": ")[2] for pid, why in session.judged.items()
                               if why.startswith("invalid:") and pid in ctx.patches})
    space = _space(contract, ctx.patches, judged, doctor, progress)
    priors = builtin_priors(space, contract.launch.world_size, contract.launch.ranks_per_node)
    if session is not None:
        priors = session.priors(contract, doctor, list(ctx.patches.values()), base=priors)
    engine = SearchEngine(space, priors, memory_limit=contract.budget.memory_limit_bytes,
                          seed=options.seed, device_memory_limit=gpu_memory(doctor))
    seen = {r.candidate.digest(): r.candidate for r in journal.trials(run_id)}
    # a scheduler's jobs outlive a killed bot: those are read back, not repeated (bot/executors/slurm/recover.py)
    if found := ctx.executor.recover_pending(contract, journal, run_id, seen):
        _emit(progress, event="resume", message=f"{found} trial(s) that ran on while the bot was down read back")
    interrupted = recover_interrupted(journal, run_id, seen, contract.budget.trial_timeout_s)
    if interrupted:
        _emit(progress, event="resume", message=f"{interrupted} interrupted trial(s) recorded")
    records = journal.trials(run_id)
    state_path = RunDir(contract.root, run_id).search_json  # the doctor made the directory
    state = _search_state(state_path)
    verified_from = state.get("verification_from")
    ran = [r for r in records if r.trial_no not in doctor.own_trials
           and (verified_from is None or r.trial_no < verified_from)]
    baseline = Candidate.of(contract.defaults())
    # the baseline re-run between search trials: the machine's drift, so trials are compared like with like
    controls = [r for r in ran if r.candidate.digest() == baseline.digest()]
    search = [r for r in ran if r.candidate.digest() != baseline.digest()]

    def rebuild(loop: SearchLoop, seen_records: Sequence[TrialRecord]) -> tuple[SearchSpace, SearchEngine]:
        return _rebuilt(contract, loop.ctx.patches, loop.judged, doctor, priors, options.seed, seen_records)

    loop = SearchLoop(ctx=ctx, run_id=run_id, doctor=doctor, progress=progress, budget_trials=options.budget_trials,
                      budget_seconds=options.budget_seconds, parallel=options.parallel, rebuild=rebuild, space=space,
                      engine=engine, session=session, screening=screening, judged=judged, search=search,
                      controls=controls, anchors=[r for r in records if r.trial_no in set(doctor.trials)],
                      superseded=set(state.get("superseded") or ()), state_path=state_path,
                      started=time.time() - sum(r.cost_s for r in (*search, *controls)))
    assert loop.schedule is not None and loop.drift is not None
    loop.schedule.since = sum(1 for r in search if not controls or r.trial_no > controls[-1].trial_no)
    for r in search:
        loop.judge(r)
    if judged.patches:
        loop.space, loop.engine = rebuild(loop, ())
    loop.engine.observe([loop.drift.adjusted(r) for r in records if r.trial_no not in loop.superseded])
    return loop


def _first_batch(loop: SearchLoop, options: RunOptions, bank_candidates: list[tuple[Candidate, float]]) -> bool:
    """The diverse start — configurations from the experience bank, the priors and space-filling picks, never a
    single incumbent; with trials one at a time, revised after each (SearchEngine.refresh_initial). A resumed run
    whose first batch had begun goes on with the guided batches. False: the space had nothing to try."""
    if any(r.candidate.digest() != loop.baseline.digest() for r in loop.search):
        return True
    rest = loop.engine.initial_batch(min(options.initial, options.budget_trials - len(loop.settled())),
                                     bank_candidates, include_baseline=False)
    if not rest and not loop.spent():
        _emit(loop.progress, event="stop", message="no untried candidate left in the space")
        return False
    while rest and not loop.spent():
        batch, rest = (rest[:1], rest[1:]) if options.parallel <= 1 else (rest, [])
        batch = batch[:max(0, options.budget_trials - len(loop.settled()))]
        if not batch:
            return True
        loop.run(batch)
        if rest:
            rest = loop.engine.refresh_initial(rest, bank_candidates)
        _control_when_due(loop)
    return True


def _guided_batches(loop: SearchLoop, options: RunOptions) -> None:
    """The models' picks (time, censored memory and crash models over every trial so far), with a model's new
    patches between batches, until the budget, the stop rule or an empty space."""
    contract = loop.ctx.contract
    while not loop.spent():
        session = loop.session
        if session is not None and session.wants_more() and loop.ctx.base is not None:
            loop.grow(session.propose(contract, loop.doctor, loop.search, loop.ctx.patches,
                                      lambda m: _emit(loop.progress, event="llm", message=m)))
        if options.stop_early and len(loop.settled()) >= options.initial:
            advice = loop.engine.stop_advice(min_effect=contract.verify.min_effect)
            if advice.should_stop:
                _emit(loop.progress, event="stop", message=f"model predicts at most "
                      f"{advice.relative_improvement:.1%} further improvement: stopping the search")
                return
        proposals = loop.engine.next_batch(q=max(1, options.parallel))
        if not proposals:
            _emit(loop.progress, event="stop", message="no untried candidate left in the space")
            return
        # a trial measured again counts once: the budget is of settled trials (else room reaches 0 unspent)
        batch = proposals[:max(0, options.budget_trials - len(loop.settled()))]
        if not batch:
            return  # never loop without running a trial
        loop.run(batch)
        _control_when_due(loop)


def _control_when_due(loop: SearchLoop) -> None:
    if loop.schedule is not None and loop.schedule.due() and not loop.spent():
        loop.control(_worth_measuring_again)


def _last_control(loop: SearchLoop) -> TrialRecord | None:
    """The control run right before verification, when it was the last trial and witnessed: verification's first
    pair takes it as its baseline run (the same configuration, adjacent in time) instead of running another."""
    trials = loop.ctx.journal.trials(loop.run_id)
    last = max(trials, key=lambda r: r.trial_no, default=None)
    if last is None or not loop.controls or last.trial_no != loop.controls[-1].trial_no:
        return None
    return last if last.outcome is Outcome.OK and last.metrics.witness else None


def _finish(loop: SearchLoop, verdicts: list[Verdict], bank: Bank | None) -> RunResult:
    """run.json, and the findings the experience bank keeps."""
    contract = loop.ctx.contract
    result = RunResult(run_id=loop.run_id, doctor=loop.doctor, search=tuple(loop.search), verdicts=tuple(verdicts),
                       drift=loop.drift, controls=tuple(loop.controls), superseded=frozenset(loop.superseded),
                       path=RunDir(contract.root, loop.run_id).run_json,
                       llm=loop.session.summary() if loop.session is not None else None)
    result.path.write_text(json.dumps(run_summary(result, loop.engine).to_dict(), indent=2, sort_keys=True,
                                      default=str) + "\n", encoding="utf-8")
    if bank is not None:
        added = remember(bank, result, contract)
        _emit(loop.progress, event="bank", message=f"{added} new finding(s) stored in the experience bank")
    return result


def _search_state(path: Path) -> dict[str, Any]:
    """What a killed run left for ``--resume``: where verification started, which trials were superseded."""
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text(encoding="utf-8")))



def _worth_measuring_again(search: Sequence[TrialRecord], drift: Drift, unsettled: tuple[float, float, float],
                           top_k: int) -> list[TrialRecord]:
    """The ok trials run between two controls that disagree which, read at the more favourable of the two
    speeds, could rank among the ``top_k`` best of the settled trials: at most ``top_k`` of them."""
    start, end, slowest = unsettled
    inside = [r for r in search if start < r.trial_no < end and r.outcome is Outcome.OK and r.metrics.step_time_s]
    outside = sorted(t for r in search if not start < r.trial_no < end and r.outcome is Outcome.OK
                     and (t := drift.adjusted(r).metrics.step_time_s))
    bar = outside[top_k - 1] if len(outside) >= top_k else math.inf
    best_case = {r.trial_no: r.metrics.step_time_s / math.exp(slowest) for r in inside}  # type: ignore[operator]
    ranked = sorted((r for r in inside if best_case[r.trial_no] <= bar), key=lambda r: best_case[r.trial_no])
    return ranked[:top_k]


def _next_trial_no(journal: Journal, run_id: str) -> int:
    numbers = [r.trial_no for r in journal.trials(run_id)] + [p.trial_no for p in journal.pending(run_id)]
    return max(numbers, default=0) + 1


def search_optimism(verified: Sequence[tuple[float, Verdict]]) -> float:
    """How much the search over-read the candidates verification has measured since: the geometric mean, over
    those verified with a comparison, of the upper bound of each verified interval over its searched speedup,
    never above 1. The search measures each candidate once and verifies the fastest readings, so the top of its
    ranking is read fast by luck (the winner's curse: on tinygpt a candidate searched at 2.52x verified at 1.56x,
    [1.37, 1.88]); the candidates below it were read by the same search on the same machine. The upper bound,
    not the point: the most favourable reading of what verification found, so a candidate is dropped only when
    even that cannot make it a contender."""
    ratios = [v.comparison.ci_high / searched for searched, v in verified
              if v.comparison is not None and searched > 0 and v.comparison.ci_high > 0]
    if not ratios:
        return 1.0
    return min(1.0, math.exp(sum(math.log(r) for r in ratios) / len(ratios)))


def worth_verifying(candidate: Candidate, measured_s: float, *, doctor: DoctorReport, space: SearchSpace | None,
                    promoted: Verdict | None, min_effect: float, optimism: float = 1.0) -> str | None:
    """Why verifying ``candidate`` (searched at ``measured_s``, read at the machine's speed the baseline controls
    nearest it measured, expressed at the doctor's: infrarsi.search.drift) cannot teach anything; None when it
    can. Verification is where the device time goes: a candidate left out of the search (a dtype this device
    only emulates, a patch judged invalid), one measured too slow to be verified faster than the baseline, or —
    once one is promoted — one whose best case cannot beat the promoted one's, is not run. "Best case": its
    searched speedup with two run-to-run standard deviations of slack, the deviation read robustly from the
    doctor's runs (one run a burst of outside load slowed tenfold does not make every candidate look possible);
    the promoted one's best case is the upper bound of its verified interval (and at least its speedup by the
    minimum effect): a candidate that could at most tie the promoted one within the noise would spend a
    verification to swap one winner for another that no run can tell apart from it. Once verification has
    measured candidates the search ranked above this one, its searched speedup is read with the search's
    ``optimism`` (:func:`search_optimism`)."""
    if space is not None and (why := space.violations(candidate)):
        return f"left out of the search ({why[0]})"
    slack = math.exp(2 * max(robust_sigma_log(doctor), 0.05))
    best_case = doctor.median_s / measured_s * min(optimism, 1.0) * slack
    read = f" read x{optimism:.2f} (the search over-read the candidates verified so far)" if optimism < 1.0 else ""
    if best_case <= 1 + min_effect:
        return (f"searched at {doctor.median_s / measured_s:.2f}x the baseline{read}: even with the noise's slack "
                f"({best_case:.2f}x) it cannot be verified faster")
    if promoted is not None and promoted.speedup is not None:
        ceiling = max(promoted.speedup * (1 + min_effect), promoted.comparison.ci_high if promoted.comparison else 0.0)
        if best_case <= ceiling:
            return (f"searched at {doctor.median_s / measured_s:.2f}x{read} (at best {best_case:.2f}x): it could "
                    f"not beat the promoted {promoted.candidate.describe()} ({promoted.speedup:.2f}x verified, "
                    f"up to {ceiling:.2f}x)")
    return None


def robust_sigma_log(doctor: DoctorReport) -> float:
    """The run-to-run log-sd of the doctor's baseline, from the median absolute deviation of its runs' medians
    (scaled to a normal's sd), never above the doctor's own figure; the doctor's figure with fewer than three."""
    medians = [statistics.median(run) for run in doctor.step_times_s if run]
    if len(medians) < 3 or any(m <= 0 for m in medians):
        return doctor.sigma_log
    logs = [math.log(m) for m in medians]
    centre = statistics.median(logs)
    mad = statistics.median(abs(v - centre) for v in logs)
    return min(doctor.sigma_log, 1.4826 * mad)


def _verify_top(ctx: TrialContext, *, run_id: str, doctor: DoctorReport, search: list[TrialRecord],
                baseline: Candidate, progress: Progress, judged: Judgements | None = None,
                session: Any = None, space: SearchSpace | None = None,
                first_baseline: TrialRecord | None = None) -> list[Verdict]:
    """Verify the ``top_k`` fastest candidates that nothing judged invalid, in order of their search times
    (``search``: read at the doctor's machine speed), skipping those that cannot teach anything
    (:func:`worth_verifying`).

    A candidate found invalid does not use up a slot: its unvindicated patches are excluded from the
    candidates still waiting and the next-best one is verified instead (at most ``top_k`` such
    replacements, so a run of invalid candidates cannot verify forever)."""
    judged = judged if judged is not None else Judgements()
    for r in search:
        if vindicates(r, doctor):
            judged.vindicate(r.candidate.patches)
    top_k = ctx.contract.verify.top_k
    ranked = top_candidates(search, len(search), baseline)
    out = RunDir(ctx.contract.root, run_id)
    verdicts: list[Verdict] = []
    verified: list[tuple[float, Verdict]] = []  # (searched speedup, verdict) of each candidate verified
    slots = replacements = 0
    references = References(ctx=ctx, run_id=run_id, doctor=doctor,
                            progress=lambda m: _emit(progress, event="verify", message=m))
    for candidate, measured in ranked:
        if slots >= top_k:
            break
        promoted = max((v for v in verdicts if v.promoted), key=lambda v: v.speedup or 0.0, default=None)
        why = judged.excludes(candidate) or worth_verifying(candidate, measured, doctor=doctor, space=space,
                                                            promoted=promoted,
                                                            min_effect=ctx.contract.verify.min_effect,
                                                            optimism=search_optimism(verified))
        if why is not None:
            _emit(progress, event="verify", message=f"not verifying {candidate.describe()}: {why}")
            continue
        cached = out.verify_json(candidate.digest())
        _emit(progress, event="stage", stage="verify", message=f"verify {slots + 1}/{top_k}: {candidate.describe()} "
              f"(searched at {measured * 1000:.1f} ms/step)")
        verdict = verify_candidate(ctx, run_id=run_id, candidate=candidate, doctor=doctor, references=references,
                                   progress=lambda m: _emit(progress, event="verify", message=m),
                                   first_baseline=first_baseline)
        # candidates verified back to back share a baseline arm: a verification that ended on a baseline run
        # hands it to the next as its first pair's baseline (the same configuration, adjacent in time)
        first_baseline = _trailing_baseline(ctx, run_id, verdict)
        write_json(cached, verdict.to_dict())
        _emit(progress, event="verdict", candidate=candidate.describe(), verdict=verdict.kind.value,
              speedup=verdict.speedup, reason=verdict.reason)
        verdicts.append(verdict)
        if verdict.kind in (VerdictKind.PROMOTED, VerdictKind.NOT_SIGNIFICANT):  # measured, both arms fully
            verified.append((doctor.median_s / measured, verdict))
        if verdict.kind is VerdictKind.INCONCLUSIVE:
            _emit(progress, event="verify", message="the machine would not sit still: the other candidates are not "
                  "verified now; `infrarsi verify` resumes this one when it is quiet")
            break
        if verdict.kind is VerdictKind.INVALID:
            blame(judged, candidate, f"verification: {verdict.reason}", session, progress)
            replacements += 1
            if replacements > top_k:
                break
            continue
        if verdict.kind not in (VerdictKind.QUARANTINED, VerdictKind.UNVERIFIED, VerdictKind.INCONCLUSIVE):
            judged.vindicate(candidate.patches)  # an unverified candidate is neither blamed nor vindicated
        slots += 1
    return verdicts


def _trailing_baseline(ctx: TrialContext, run_id: str, verdict: Verdict) -> TrialRecord | None:
    """The verification's last run, when it was a counted, witnessed baseline run (None otherwise)."""
    runs = [*verdict.baseline_trials, *verdict.candidate_trials]
    if not runs or max(runs) not in verdict.baseline_trials or max(runs) in verdict.reruns:
        return None
    last = next((r for r in ctx.journal.trials(run_id) if r.trial_no == max(runs)), None)
    return last if last is not None and last.outcome is Outcome.OK and last.metrics.witness else None


def _space(contract: Contract, patches: Mapping[str, PatchSpec], judged: Judgements, doctor: DoctorReport,
           progress: Progress | None = None) -> SearchSpace:
    """The joint space of the contract's knobs and ``patches``, less what was judged invalid, the settings
    that select a dtype this device only emulates or the contract does not allow (infrarsi/dtype_levers.py),
    and the parallel layouts the launcher rejects (launcher_checks.py), each said once when ``progress``;
    with the pipeline-bubble column
    when the contract says enough, columns for tensor- and expert-parallel groups that span nodes and for
    model-state bytes (design_columns.py)."""
    device = for_doctor(contract.knobs, list(patches.values()), doctor.fingerprint or {}, doctor.peak_flops).plus(
        precision_exclusions(list(patches.values()), doctor.work.allowed_dtypes if doctor.work else ()))
    argv = (*contract.workload.command, *contract.workload.args)
    launcher = launcher_constraints(contract.knobs, contract.launch.world_size,
                                    fixed_global_batch(contract.knobs, contract.constraints, argv))
    if progress is not None:
        for note in device.notes:
            _emit(progress, event="device", message=f"device: {note}")
        if launcher:
            _emit(progress, event="launcher", message=f"launcher: {len(launcher)} parallel layouts left out, which "
                  f"the launcher rejects on {contract.launch.world_size} ranks (e.g. {launcher[0].describe()}: "
                  f"{launcher[0].reason})")
    return SearchSpace.from_contract(contract.knobs, (*contract.constraints, *device.constraints, *launcher),
                                     list(patches.values()),
                                     (*judged.excluded_sets, *((pid,) for pid in device.patches)),
                                     derived_features(contract.knobs, contract.constraints,
                                                      contract.launch.world_size, contract.launch.ranks_per_node,
                                                      argv))


def _rebuilt(contract: Contract, patches: Mapping[str, PatchSpec], judged: Judgements, doctor: DoctorReport,
             priors: Any, seed: int, records: Sequence[TrialRecord]) -> tuple[SearchSpace, SearchEngine]:
    """The space and engine again after the patches changed (a proposal round, a patch judged invalid),
    with every record so far observed."""
    space = _space(contract, patches, judged, doctor)
    engine = SearchEngine(space, priors, memory_limit=contract.budget.memory_limit_bytes, seed=seed,
                          device_memory_limit=gpu_memory(doctor))
    engine.observe(records)
    return space, engine






def run_summary(result: RunResult, engine: SearchEngine) -> RunSummary:
    """What run.json holds: the search trials, every verdict, the posterior and the proposer's cost."""
    drift = result.drift

    def trial(r: TrialRecord) -> SearchTrial:
        if drift is None:
            return SearchTrial.of(r)
        superseded = r.trial_no in result.superseded
        against = "not counted: the machine's speed changed between the controls around it; measured again" \
            if superseded else drift.describe(r)
        return SearchTrial.of(r, adjusted=drift.adjusted(r), against=against, superseded=superseded)

    return RunSummary(run_id=result.run_id, baseline_step_s=result.doctor.median_s,
                      trials=tuple(trial(r) for r in result.search), verdicts=result.verdicts,
                      controls=tuple(trial(r) for r in result.controls),
                      posterior=engine.posterior_report().to_dict(),
                      llm=dict(result.llm) if result.llm is not None else None)



def gpu_memory(doctor: DoctorReport) -> float | None:
    """One GPU's memory as the doctor's device probe saw it (None on a CPU): the memory model's limit on a GPU
    until trials report what their allocator could grow to."""
    value = (doctor.fingerprint or {}).get("gpu_memory_bytes")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def fingerprints(contract: Contract, doctor: DoctorReport) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(hardware, workload) fingerprints of this run, as the bank compares them."""
    parameters = doctor.model_flops_per_step / 6 / contract.workload.tokens_per_step \
        if doctor.model_flops_per_step else None
    # The contract's launch says how many ranks the job runs on; the doctor's reading is the fallback.
    world = contract.launch.world_size if contract.launch.executor == "torchrun" \
        else int(doctor.fingerprint.get("world_size") or 1)
    hardware = hardware_fingerprint(doctor.fingerprint, world_size=world)
    workload = workload_fingerprint(family=contract.workload.family,
                                    parameters=int(parameters) if parameters else None,
                                    global_batch=contract.workload.tokens_per_step,
                                    world_size=world, experts=contract.workload.experts,
                                    top_k=contract.workload.top_k)
    return hardware, workload


def bank_seeds(bank: Bank, contract: Contract, doctor: DoctorReport, top: int = 4) -> list[tuple[Candidate, float]]:
    hardware, workload = fingerprints(contract, doctor)
    return as_pairs(bank.similar(hardware, workload, top=top))


def memory_ratio(records: Sequence[TrialRecord], candidate: Candidate, *, baseline_peak: int | None,
                 baseline_gpu_peak: int | None) -> float | None:
    """The candidate's median peak over the baseline's (the doctor's figures): the GPU's where both have it
    (the memory that runs out there), else the host's; None without an ok trial of the candidate."""
    mine = [r for r in records if r.candidate.digest() == candidate.digest()]
    for name, base in (("device_peak_mem_bytes", baseline_gpu_peak), ("peak_mem_bytes", baseline_peak)):
        peak = median_bytes(mine, name)
        if peak and base:
            return peak / base
    return None


def remember(bank: Bank, result: RunResult, contract: Contract) -> int:
    """Store the run's verdicts and failed trials as findings; returns how many were new. An inconclusive
    verification (the machine would not sit still) and an unverified one (a check could not be made there) say
    nothing about the candidate and are never stored."""
    hardware, workload = fingerprints(contract, result.doctor)
    repo = contract.root.name
    findings = [Finding(hardware=hardware, workload=workload, candidate=v.candidate,
                        effect=BankEffect.from_speedup(v.speedup, v.comparison.ci_low if v.comparison else None,
                                                       v.comparison.ci_high if v.comparison else None,
                                                       memory_ratio=memory_ratio(
                                                           result.search, v.candidate,
                                                           baseline_peak=result.doctor.peak_mem_bytes,
                                                           baseline_gpu_peak=result.doctor.gpu_peak_bytes)),
                        outcome=FindingOutcome(v.kind.value), run_id=result.run_id, repo=repo)
                for v in result.verdicts if v.kind.value in STORED_VERDICTS]
    for r in result.search:
        if r.outcome in (Outcome.OOM, Outcome.CRASH, Outcome.TIMEOUT, Outcome.INVALID):
            findings.append(Finding(hardware=hardware, workload=workload, candidate=r.candidate,
                                    outcome=FindingOutcome(r.outcome.value), run_id=result.run_id, repo=repo))
    return bank.add_many(findings)
