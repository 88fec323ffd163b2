"""The verdict on a candidate: interleaved A/B runs, a rank test, a bootstrap interval, every invariant.

A faster number that is noise, or that came from computing something else, is
what this module exists to refuse. The verdict is a value with every
measurement kept: ``promoted``, ``not_significant``, ``invalid`` (an invariant
broke), ``unverified`` (a check the promotion needs could not be made there, and
the contract does not waive it), ``quarantined`` (a result too good to believe
without a human) or ``inconclusive`` (the machine would not sit still: no answer). Each invariant row is ``ok``, ``broken`` or ``not_checked``
with why: a comparison that was not made never reads as passed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, Sequence

from infrarsi.invariants import (NEVER_EXCUSED, WITNESS_ROWS, CheckStatus, InvariantCheck, WorkReference, compared,
                                 excused, not_checked, record_invariants, rank_reports, step_tokens, window_loss,
                                 witnessed_report)
from infrarsi.lever_rows import NUMERIC_ROWS, mask_mismatch
from infrarsi.loss_band import LossBand, final_loss_worse, first_step_outside
from infrarsi.disturbance import PSI_EXCESS
from infrarsi.step_clock import READER_LAG_S, SPAN_AGREEMENT, paced
from infrarsi.stats import Comparison, compare
from infrarsi.trial_record import Candidate, Outcome, TrialRecord, parse_description

# A job whose own clock claims steps this much shorter than the bot saw is lying or broken.
CLOCK_DISAGREEMENT = 0.5
# How a verdict's comparison is made, in words (reports and run.json).
TEST = "one-sided Mann-Whitney U + percentile bootstrap of the ratio of medians"


class VerdictKind(StrEnum):
    PROMOTED = "promoted"
    NOT_SIGNIFICANT = "not_significant"
    INVALID = "invalid"
    UNVERIFIED = "unverified"  # a required check could not be made on this executor (never the candidate's fault)
    QUARANTINED = "quarantined"
    # The machine would not sit still: more runs disturbed from outside than could be re-run, and waiting for
    # quiet did not end it. Not an answer about the candidate: never stored as experience; resumable.
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifyPolicy:
    """What a promotion needs; defaults match the contract's [verify] table."""

    min_effect: float = 0.01
    alpha: float = 0.05
    max_speedup: float = 10.0  # above this a result is quarantined for a human to look at
    n_boot: int = 2000
    seed: int = 0
    waive: tuple[str, ...] = ()  # rows whose "not checked" does not stop a promotion (contract [verify] waive)


@dataclass(frozen=True, kw_only=True, slots=True)
class Reference:
    """What a candidate trial is held to: the baseline's witnessed work and its loss band, taken at the
    candidate's own split of the global batch (``split``; empty: the baseline's), and why either is missing."""

    work: WorkReference | None
    band: LossBand | None
    split: tuple[tuple[str, Any], ...] = ()
    missing: str = ""  # why ``work`` is None (shown on every witnessed row)
    # What the candidate's knobs decide off their defaults (infrarsi.decisions.moved_decisions): an
    # ``optimizer_impl`` knob may change the optimizer's class, a ``tf32_matmul`` knob float32 math.
    moved: tuple[str, ...] = ()
    # (row, why) of every row the baseline's own witnessed repeats fail against each other (the doctor's A/A
    # check, DoctorReport.baseline_fails): not checked for every candidate of the run, never convicting.
    baseline_fails: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    kind: VerdictKind
    reason: str
    candidate: Candidate
    baseline_trials: tuple[int, ...]
    candidate_trials: tuple[int, ...]
    baseline_step_s: tuple[float, ...]
    candidate_step_s: tuple[float, ...]
    comparison: Comparison | None
    invariants: tuple[InvariantCheck, ...]
    pairs: int = 0
    """A/B pairs the verification ran (baseline and candidate runs started in pairs)."""
    stop: str = ""
    """Why it stopped: ``efficacy``, ``futility``, ``max_pairs`` (a sequential plan), ``fixed`` (a set number of
    pairs), ``invariant`` (a candidate run broke one); empty for a verdict written before this was recorded."""
    reruns: tuple[int, ...] = ()
    """Trials disturbed from outside (infrarsi.disturbance) and run again instead of counted."""
    disturbed: tuple[int, ...] = ()
    """Every trial found disturbed from outside (re-run, or the one an inconclusive verification stopped at)."""
    waited_s: float = 0.0
    """Seconds spent waiting for the machine to become quiet."""

    @property
    def promoted(self) -> bool:
        return self.kind is VerdictKind.PROMOTED

    @property
    def speedup(self) -> float | None:
        return self.comparison.speedup if self.comparison else None

    def to_dict(self) -> dict[str, Any]:
        """The verdict as run.json and ``verify-*.json`` hold it: flat figures for readers, and the full record."""
        c = self.comparison
        return {
            "verdict": self.kind.value, "reason": self.reason, "candidate": self.candidate.describe(),
            "candidate_digest": self.candidate.digest(),
            "knobs": [[k, v] for k, v in self.candidate.knobs], "patches": list(self.candidate.patches),
            "comparison": asdict(c) if c else None,
            "baseline_trials": list(self.baseline_trials), "candidate_trials": list(self.candidate_trials),
            "baseline_step_s": list(self.baseline_step_s), "candidate_step_s": list(self.candidate_step_s),
            "speedup": c.speedup if c else None, "ci": [c.ci_low, c.ci_high] if c else None,
            "ci_level": c.ci_level if c else None, "p_value": c.p_value if c else None,
            "test": TEST,
            "invariants": [i.to_dict() for i in self.invariants],
            "pairs": self.pairs, "stop": self.stop, "reruns": list(self.reruns),
            "disturbed": list(self.disturbed), "waited_s": self.waited_s,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Verdict:
        """The verdict :meth:`to_dict` wrote; a dict written before it held the full record is upgraded
        from its flat figures (see :func:`_legacy_candidate` and :func:`_legacy_comparison`)."""
        if "knobs" in data:
            candidate = Candidate(knobs=tuple((str(k), v) for k, v in data["knobs"]),
                                  patches=tuple(data.get("patches") or ()))
        else:
            candidate = _legacy_candidate(str(data["candidate"]))
        raw = data.get("comparison")
        if raw:
            comparison: Comparison | None = Comparison(**{**raw, "baseline": tuple(raw["baseline"]),
                                                          "candidate": tuple(raw["candidate"])})
        else:
            comparison = _legacy_comparison(data) if "comparison" not in data else None
        return Verdict(kind=VerdictKind(data["verdict"]), reason=str(data.get("reason", "")), candidate=candidate,
                       baseline_trials=tuple(data.get("baseline_trials") or ()),
                       candidate_trials=tuple(data.get("candidate_trials") or ()),
                       baseline_step_s=tuple(data.get("baseline_step_s") or ()),
                       candidate_step_s=tuple(data.get("candidate_step_s") or ()), comparison=comparison,
                       invariants=tuple(InvariantCheck.from_dict(i) for i in data.get("invariants") or ()),
                       pairs=int(data.get("pairs") or 0), stop=str(data.get("stop") or ""),
                       reruns=tuple(int(t) for t in data.get("reruns") or ()),
                       disturbed=tuple(int(t) for t in data.get("disturbed") or ()),
                       waited_s=float(data.get("waited_s") or 0.0))


def _legacy_candidate(text: str) -> Candidate:
    """A candidate from its description, for verdicts written with only ``candidate`` text.

    Values stay text, so the candidate describes itself exactly as it was written;
    its digest may differ from the original's, so readers match trials by number.
    """
    knobs, patches = parse_description(text)
    return Candidate(knobs=tuple(knobs), patches=tuple(patches))


def _legacy_comparison(data: Mapping[str, Any]) -> Comparison | None:
    """A comparison rebuilt from the flat figures of an old verdict; what they did not keep is marked unknown."""
    if data.get("speedup") is None or not data.get("ci"):
        return None
    base = tuple(float(x) for x in data.get("baseline_step_s") or ())
    cand = tuple(float(x) for x in data.get("candidate_step_s") or ())
    level = float(data.get("ci_level") or 0.0)
    return Comparison(baseline=base, candidate=cand, n_baseline=len(base), n_candidate=len(cand),
                      median_baseline=statistics.median(base) if base else math.nan,
                      median_candidate=statistics.median(cand) if cand else math.nan,
                      speedup=float(data["speedup"]), p_value=float(data.get("p_value") or math.nan),
                      u_statistic=math.nan, mwu_method="unknown", ci_low=float(data["ci"][0]),
                      ci_high=float(data["ci"][1]), ci_level=level, alpha=(1.0 - level) / 2, min_effect=math.nan,
                      n_boot=0, seed=0, significant=data["verdict"] in ("promoted", "quarantined"),
                      reason=str(data.get("reason", "")))


def trial_invariants(record: TrialRecord, reference: Reference) -> list[InvariantCheck]:
    """Every row one candidate trial is held to, against the baseline's ``reference`` (at the candidate's own
    split). A row whose comparison could not be made is ``not_checked`` with why — never ``ok``."""
    m = record.metrics
    t = f"trial {record.trial_no}"
    checks = [compared("outcome", record.outcome is Outcome.OK,
                       f"{t}: {record.outcome.value}" + (f" ({record.reason})" if record.reason else ""))]
    if record.outcome is not Outcome.OK:
        return checks
    checks.append(_tokens_row(record, reference.work))
    checks.append(compared("lock", True, f"{t}: locked files unchanged where the job ran, before and after")
                  if m.lock_checked else
                  not_checked("lock", f"{t}: the executor did not check the locked files where the job ran"))
    if reference.work is not None:
        checks += record_invariants(record, reference.work, moved=reference.moved)
    else:
        why = reference.missing or "the doctor has no witnessed baseline run"
        checks += [not_checked(name, f"{t}: no witnessed baseline to compare with ({why})") for name in WITNESS_ROWS]
    checks += _loss_rows(record, reference.band)
    checks.append(clock_row(record))
    checks = _masks_compared(checks, record, reference.work)
    return excused(checks, reference.baseline_fails, record.trial_no) if reference.baseline_fails else checks


def rows_the_baseline_fails(records: Sequence[TrialRecord], reference: Reference) -> tuple[tuple[str, str], ...]:
    """Every row the baseline's own witnessed repeats break against ``reference`` (built from those repeats): a
    row the baseline fails cannot tell a candidate from the baseline, so it may convict none. (row, the first
    repeat's detail), in row order; ``outcome`` and ``clock`` are never among them."""
    fails: dict[str, str] = {}
    plain = replace(reference, baseline_fails=())
    for record in records:
        if record.outcome is not Outcome.OK or not record.metrics.witness:
            continue
        for check in trial_invariants(record, plain):
            if check.broken and check.name not in NEVER_EXCUSED:
                fails.setdefault(check.name, check.detail)
    return tuple(fails.items())


def excuse_from_baselines(broken: Sequence[InvariantCheck], baselines: Sequence[TrialRecord],
                          reference: Reference) -> Reference:
    """``reference`` with each row in ``broken`` that one of ``baselines`` (verification's own baseline runs) also
    breaks against it added to ``baseline_fails``: the doctor's few repeats can miss a spread that later baseline
    runs show (an unseeded job's first step), and a row the baseline itself fails cannot convict a candidate.
    A candidate at another split is held to a split reference its default-split baselines are not: unchanged."""
    if reference.split or not broken:
        return reference
    names = {c.name for c in broken} - set(dict(reference.baseline_fails)) - set(NEVER_EXCUSED)
    fails = [(n, why) for n, why in rows_the_baseline_fails(baselines, reference) if n in names]
    return replace(reference, baseline_fails=(*reference.baseline_fails, *fails)) if fails else reference


def _masks_compared(checks: list[InvariantCheck], record: TrialRecord,
                    work: WorkReference | None) -> list[InvariantCheck]:
    """``checks`` with the rows that compare numbers step for step not checked where dropout's masks were drawn
    otherwise than the baseline's (a fused attention kernel's own masks: infrarsi.lever_rows)."""
    report = witnessed_report(record)
    why = mask_mismatch(report, work.reports[0]) if report is not None and work is not None and work.reports \
        else None
    if why is None:
        return checks
    return [not_checked(c.name, f"trial {record.trial_no}: {why}") if c.name in NUMERIC_ROWS else c for c in checks]


def clock_row(record: TrialRecord) -> InvariantCheck:
    """The step time the bot measured, cross-checked: inside the process's wall time, not far longer than the
    job's own clock claims, and — witnessed — the step events neither held back (the bot's span of the window
    against the witness's span of the same optimizer steps) nor paced (the median interval against the
    witness's median step). The figure itself cannot be shrunk by either (infrarsi.step_clock)."""
    m = record.metrics
    t = f"trial {record.trial_no}"
    problems = []
    measured = sum(m.step_times_s)
    if measured > m.wall_s * 1.001:
        problems.append(f"{measured:.3f} s of measured steps in {m.wall_s:.3f} s of process wall time")
    claimed = m.child_step_time_s
    if claimed is not None and m.step_time_s and claimed / m.step_time_s < CLOCK_DISAGREEMENT:
        problems.append(f"the job's own clock claims {claimed:.4f} s/step")
    report = witnessed_report(record)
    # A host so busy that runnable tasks waited for a CPU much of the trial starves the bot's reader too: its lag
    # cannot be told from events held back, so the cross-checks are not made then (the figure itself cannot be
    # shrunk either way: infrarsi.step_clock).
    pressure = dict(m.host).get("psi_some_s", 0.0) / m.wall_s if m.wall_s else 0.0
    busy = pressure > PSI_EXCESS
    if not busy and m.witness_span_s and m.span_s is not None \
            and m.span_s < SPAN_AGREEMENT * m.witness_span_s - READER_LAG_S:
        problems.append(f"the window's step events arrived over {m.span_s:.3f} s while its optimizer steps took "
                        f"{m.witness_span_s:.3f} s by the witness's clock: events were held back")
    paced_why = None if busy else paced(m.step_times_s, report, first_step=m.clock_first_step,
                                        last_step=m.clock_last_step)
    if paced_why:
        problems.append(paced_why)
    how = {"anchored": "from the witness's end of the window's first optimizer step to the bot's stamp of the "
                       "last measured event", "span": "over the bot's stamps of the window's first and last "
                                                       "events"}.get(m.clock, "")
    detail = (f"{t}: bot measured {m.step_time_s or 0:.4f} s/step" + (f" ({how})" if how else "")
              + f" within {m.wall_s:.1f} s of process wall time"
              + (f"; the job's own clock claims {claimed:.4f} s/step" if claimed and not problems else ""))
    if problems:
        return compared("clock", False, f"{t}: " + "; ".join(problems))
    if report is None and m.clock:
        detail += "; not witnessed: event pacing not cross-checked"
    elif busy:
        detail += (f"; the host was busy ({pressure:.0%} CPU pressure): event pacing not cross-checked, the reader's "
                   "lag could not be told from it")
    return compared("clock", True, detail)


def _tokens_row(record: TrialRecord, work: WorkReference | None) -> InvariantCheck:
    """The same tokens every step: the witness's count of what a step consumed against the baseline's, else the
    job's own report (the trial's outcome already held that to the contract), else not checked."""
    t = f"trial {record.trial_no}"
    report = witnessed_report(record)
    measured = step_tokens(report, list(rank_reports(record).values())) if report is not None else None
    expected = work.tokens if work is not None else None
    if measured is not None and expected is not None:
        return compared("tokens_per_step", measured == expected, (
            f"{t}: the witness saw {measured:,} tokens consumed in optimizer step {report.count_step}"  # type: ignore[union-attr]
            f" (token ids reaching an embedding, or targets reaching the loss); the baseline's {expected:,}"))
    if record.metrics.tokens_per_step is not None:
        return compared("tokens_per_step", True, f"{t}: the job reported {record.metrics.tokens_per_step:,} tokens "
                        "every measured step, as the contract fixes")
    return not_checked("tokens_per_step", f"{t}: the job reports no tokens per step and the witness saw no token ids "
                       "reach an embedding nor targets reach a loss")


def _loss_rows(record: TrialRecord, band: LossBand | None) -> list[InvariantCheck]:
    """The loss curve against the band: the losses the witness saw reach backward() when the band holds those
    (never the number the job prints, which a patch can print in band), else the printed ones."""
    t = f"trial {record.trial_no}"
    if band is not None and band.source == "witness":
        if witnessed_report(record) is None:
            why = f"{t}: not witnessed: the losses that reached backward() were not seen"
            return [not_checked("loss_band", why), not_checked("final_loss", why)]
        seen = window_loss(record, band.first_step, len(band.mean))
        if seen is None:
            why = (f"{t}: the witness saw no loss reach backward() in optimizer steps {band.first_step}-"
                   f"{band.first_step + len(band.mean) - 1} (the baseline's did)")
            return [compared("loss_band", False, why), compared("final_loss", False, why)]
        loss: tuple[float, ...] = seen
    else:
        loss = record.metrics.loss
    if band is None or not loss:
        why = f"{t}: " + ("no baseline loss band" if band is None else "the job printed no loss on its step lines")
        return [not_checked("loss_band", why), not_checked("final_loss", why)]
    step = first_step_outside(band, loss)
    what = "loss that reached backward()" if band.source == "witness" else "printed loss"
    if step is None:
        rows = [compared("loss_band", True, f"{t}: every measured step's {what} inside the band")]
    else:
        got = loss[step - 1] if step <= len(loss) else float("nan")
        where = (f"optimizer step {band.first_step + step - 1}" if band.source == "witness"
                 else f"measured step {step}")
        rows = [compared("loss_band", False,
                         f"{t}: the {what} of {where} left the baseline loss band (loss {got:.5f}, band "
                         f"[{band.lower[step - 1]:.5f}, {band.upper[step - 1]:.5f}])"
                         if step <= len(band.lower) else f"{t}: fewer loss values than the baseline")]
    worse = final_loss_worse(band, loss)
    rows.append(compared("final_loss", worse is None, f"{t}: final {what} "
                         + ("within tolerance" if worse is None else f"{worse:.2%} worse than baseline")))
    return rows


def waived(checks: Sequence[InvariantCheck], waive: Sequence[str]) -> tuple[InvariantCheck, ...]:
    """``checks`` with the rows the contract waives marked (only rows that were not checked: a broken row is
    never waived)."""
    return tuple(replace(c, waived=True) if c.status is CheckStatus.NOT_CHECKED and c.name in waive else c
                 for c in checks)


def missing_checks(checks: Sequence[InvariantCheck]) -> list[InvariantCheck]:
    """The rows a promotion needs that were not checked and are not waived, one per name (a row the baseline fails
    too is never needed: it could not tell a candidate from the baseline)."""
    seen: dict[str, InvariantCheck] = {}
    for c in checks:
        if c.status is CheckStatus.NOT_CHECKED and not c.waived and not c.baseline_fails:
            seen.setdefault(c.name, c)
    return list(seen.values())


def unverified_reason(missing: Sequence[InvariantCheck], executor: str | None = None) -> str:
    where = f" on the {executor} executor" if executor else ""
    names = ", ".join(c.name for c in missing)
    return (f"could not be verified{where}: {names} not checked ({missing[0].detail}); nothing is promoted "
            f"unverified: make the check possible, or waive it in [verify] waive = [...] if that is intended")


def judge(baseline: Sequence[TrialRecord], candidate: Sequence[TrialRecord], *, reference: Reference,
          policy: VerifyPolicy = VerifyPolicy(), peak_flops: float | None = None,
          model_flops_per_step: float | None = None, extra: Sequence[InvariantCheck] = ()) -> Verdict:
    """The verdict from interleaved baseline and candidate trials, every row of every candidate trial held to
    ``reference`` (plus ``extra`` rows made once for the candidate: its project metadata, its split's
    reference)."""
    cand = candidate[0].candidate if candidate else Candidate()
    base_ok = [r for r in baseline if r.outcome is Outcome.OK and r.metrics.step_time_s]
    rows: list[InvariantCheck] = excused(extra, reference.baseline_fails)
    for r in candidate:
        rows += trial_invariants(r, reference)
    checks = waived(rows, policy.waive)
    common = dict(candidate=cand, baseline_trials=tuple(r.trial_no for r in baseline),
                  candidate_trials=tuple(r.trial_no for r in candidate),
                  baseline_step_s=tuple(r.metrics.step_time_s or 0.0 for r in base_ok),
                  candidate_step_s=tuple(r.metrics.step_time_s or 0.0 for r in candidate
                                         if r.outcome is Outcome.OK))
    broken = [c for c in checks if c.broken]
    if broken:
        return Verdict(kind=VerdictKind.INVALID, reason=f"{broken[0].name}: {broken[0].detail}", comparison=None,
                       invariants=checks, **common)
    if len(base_ok) < 2 or len(candidate) < 2:
        return Verdict(kind=VerdictKind.NOT_SIGNIFICANT, reason="fewer than two good runs in an arm",
                       comparison=None, invariants=checks, **common)
    comparison = compare(common["baseline_step_s"], common["candidate_step_s"], min_effect=policy.min_effect,
                         alpha=policy.alpha, n_boot=policy.n_boot, seed=policy.seed)
    missing = missing_checks(checks)
    if missing and comparison.significant:
        executor = candidate[0].executor if candidate else None
        return Verdict(kind=VerdictKind.UNVERIFIED, reason=unverified_reason(missing, executor),
                       comparison=comparison, invariants=checks, **common)
    if not comparison.significant:
        return Verdict(kind=VerdictKind.NOT_SIGNIFICANT, reason=comparison.reason, comparison=comparison,
                       invariants=checks, **common)
    if comparison.speedup > policy.max_speedup:
        return Verdict(kind=VerdictKind.QUARANTINED,
                       reason=f"speedup {comparison.speedup:.2f}x is above the plausibility limit "
                              f"{policy.max_speedup:g}x; a human should look before it is promoted",
                       comparison=comparison, invariants=checks, **common)
    if peak_flops and model_flops_per_step:
        achieved = model_flops_per_step / comparison.median_candidate
        if achieved > peak_flops:
            return Verdict(kind=VerdictKind.QUARANTINED,
                           reason=f"the candidate would compute {achieved:.3g} FLOP/s, above this device's measured "
                                  f"peak {peak_flops:.3g}; it cannot be doing the same work",
                           comparison=comparison, invariants=checks, **common)
    return Verdict(kind=VerdictKind.PROMOTED, reason=comparison.reason, comparison=comparison,
                   invariants=checks, **common)
