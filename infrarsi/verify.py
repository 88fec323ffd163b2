"""The verdict on a candidate: interleaved A/B runs, a rank test, a bootstrap interval, every invariant.

A faster number that is noise, or that came from computing something else, is
what this module exists to refuse. The verdict is a value with every
measurement kept: ``promoted``, ``not_significant``, ``invalid`` (an invariant
broke) or ``quarantined`` (a result too good to believe without a human).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Sequence

from infrarsi.invariants import InvariantCheck, WorkReference, record_invariants
from infrarsi.loss_band import LossBand, final_loss_worse, first_step_outside
from infrarsi.stats import Comparison, compare
from infrarsi.trial import Candidate, Outcome, TrialRecord

# A job whose own clock claims steps this much shorter than the bot saw is lying or broken.
CLOCK_DISAGREEMENT = 0.5
# How a verdict's comparison is made, in words (reports and run.json).
TEST = "one-sided Mann-Whitney U + percentile bootstrap of the ratio of medians"


class VerdictKind(StrEnum):
    PROMOTED = "promoted"
    NOT_SIGNIFICANT = "not_significant"
    INVALID = "invalid"
    QUARANTINED = "quarantined"


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifyPolicy:
    """What a promotion needs; defaults match the contract's [verify] table."""

    min_effect: float = 0.01
    alpha: float = 0.05
    max_speedup: float = 10.0  # above this a result is quarantined for a human to look at
    n_boot: int = 2000
    seed: int = 0


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
            "invariants": [{"name": i.name, "ok": i.ok, "detail": i.detail} for i in self.invariants],
            "pairs": self.pairs, "stop": self.stop,
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
                       invariants=tuple(InvariantCheck(name=i["name"], ok=bool(i["ok"]), detail=i["detail"])
                                        for i in data.get("invariants") or ()),
                       pairs=int(data.get("pairs") or 0), stop=str(data.get("stop") or ""))


def _legacy_candidate(text: str) -> Candidate:
    """A candidate from its description, for verdicts written with only ``candidate`` text.

    Values stay text, so the candidate describes itself exactly as it was written;
    its digest may differ from the original's, so readers match trials by number.
    """
    if text == Candidate().describe():
        return Candidate()
    knobs, patches = [], []
    for part in text.split(" "):
        if part.startswith("+"):
            patches.append(part[1:])
        else:
            name, _, value = part.partition("=")
            knobs.append((name, value))
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


def trial_invariants(record: TrialRecord, band: LossBand | None,
                     reference: WorkReference | None = None, *, printed_loss: bool = True) -> list[InvariantCheck]:
    """The invariants one candidate trial must hold (its outcome already covers tokens, the lock and whether
    its witness can be trusted); with the baseline's witnessed ``reference``, the work invariants first.

    ``printed_loss=False``: the candidate splits the global batch into micro-batches differently, and many jobs
    print the loss of the last micro-batch only (nanoGPT: ``loss.item() * gradient_accumulation_steps``), which
    then moves with the split although the step computes the same thing. Its printed loss is not compared
    (loss band, final loss, the step-1 loss); the witness's gradients at step 1, its weights after the measured
    steps and the counted work still are — with a reference, every cheat the red team knows is caught by one
    of those too (docs/trials.md)."""
    m = record.metrics
    checks = [InvariantCheck(name="outcome", ok=record.outcome is Outcome.OK,
                             detail=f"trial {record.trial_no}: {record.outcome.value}"
                             + (f" ({record.reason})" if record.reason else ""))]
    if record.outcome is not Outcome.OK:
        return checks
    checks.append(InvariantCheck(name="tokens_per_step", ok=True,
                                 detail=f"trial {record.trial_no}: {m.tokens_per_step} tokens every step"))
    checks.append(InvariantCheck(name="lock", ok=True, detail=f"trial {record.trial_no}: locked files unchanged "
                                 "before and after"))
    if reference is not None:
        checks += record_invariants(record, reference, printed_loss=printed_loss or reference is None)
    if band is not None and not printed_loss and reference is not None:
        checks.append(InvariantCheck(name="loss_band", ok=True, detail=(
            f"trial {record.trial_no}: printed loss not compared: the global batch is split differently, and the "
            "job may print one micro-batch's loss; gradients, weights and work are compared instead")))
    elif band is not None:
        step = first_step_outside(band, m.loss)
        if step is None:
            checks.append(InvariantCheck(name="loss_band", ok=True,
                                         detail=f"trial {record.trial_no}: every measured step inside the band"))
        else:
            got = m.loss[step - 1] if step <= len(m.loss) else float("nan")
            checks.append(InvariantCheck(
                name="loss_band", ok=False,
                detail=f"trial {record.trial_no}: measured step {step} left the baseline loss band "
                       f"(loss {got:.5f}, band [{band.lower[step - 1]:.5f}, {band.upper[step - 1]:.5f}])"
                if step <= len(band.lower) else f"trial {record.trial_no}: fewer loss values than the baseline"))
        worse = final_loss_worse(band, m.loss)
        checks.append(InvariantCheck(name="final_loss", ok=worse is None,
                                     detail=f"trial {record.trial_no}: final loss "
                                     + ("within tolerance" if worse is None else f"{worse:.2%} worse than baseline")))
    measured = sum(m.step_times_s)
    consistent = measured <= m.wall_s * 1.001
    claimed = m.child_step_time_s
    if claimed is not None and m.step_time_s:
        consistent = consistent and claimed / m.step_time_s >= CLOCK_DISAGREEMENT
    checks.append(InvariantCheck(
        name="clock", ok=consistent,
        detail=f"trial {record.trial_no}: bot measured {m.step_time_s or 0:.4f} s/step within {m.wall_s:.1f} s of "
               f"process wall time" + (f"; the job's own clock claims {claimed:.4f} s/step" if claimed else "")))
    return checks


def judge(baseline: Sequence[TrialRecord], candidate: Sequence[TrialRecord], *, band: LossBand | None,
          policy: VerifyPolicy = VerifyPolicy(), peak_flops: float | None = None,
          model_flops_per_step: float | None = None, reference: WorkReference | None = None,
          printed_loss: bool = True) -> Verdict:
    """The verdict from interleaved baseline and candidate trials (``printed_loss``: :func:`trial_invariants`)."""
    cand = candidate[0].candidate if candidate else Candidate()
    base_ok = [r for r in baseline if r.outcome is Outcome.OK and r.metrics.step_time_s]
    checks: list[InvariantCheck] = []
    for r in candidate:
        checks += trial_invariants(r, band, reference, printed_loss=printed_loss)
    common = dict(candidate=cand, baseline_trials=tuple(r.trial_no for r in baseline),
                  candidate_trials=tuple(r.trial_no for r in candidate),
                  baseline_step_s=tuple(r.metrics.step_time_s or 0.0 for r in base_ok),
                  candidate_step_s=tuple(r.metrics.step_time_s or 0.0 for r in candidate
                                         if r.outcome is Outcome.OK))
    broken = [c for c in checks if not c.ok]
    if broken:
        return Verdict(kind=VerdictKind.INVALID, reason=f"{broken[0].name}: {broken[0].detail}", comparison=None,
                       invariants=tuple(checks), **common)
    if len(base_ok) < 2 or len(candidate) < 2:
        return Verdict(kind=VerdictKind.NOT_SIGNIFICANT, reason="fewer than two good runs in an arm",
                       comparison=None, invariants=tuple(checks), **common)
    comparison = compare(common["baseline_step_s"], common["candidate_step_s"], min_effect=policy.min_effect,
                         alpha=policy.alpha, n_boot=policy.n_boot, seed=policy.seed)
    if not comparison.significant:
        return Verdict(kind=VerdictKind.NOT_SIGNIFICANT, reason=comparison.reason, comparison=comparison,
                       invariants=tuple(checks), **common)
    if comparison.speedup > policy.max_speedup:
        return Verdict(kind=VerdictKind.QUARANTINED,
                       reason=f"speedup {comparison.speedup:.2f}x is above the plausibility limit "
                              f"{policy.max_speedup:g}x; a human should look before it is promoted",
                       comparison=comparison, invariants=tuple(checks), **common)
    if peak_flops and model_flops_per_step:
        achieved = model_flops_per_step / comparison.median_candidate
        if achieved > peak_flops:
            return Verdict(kind=VerdictKind.QUARANTINED,
                           reason=f"the candidate would compute {achieved:.3g} FLOP/s, above this device's measured "
                                  f"peak {peak_flops:.3g}; it cannot be doing the same work",
                           comparison=comparison, invariants=tuple(checks), **common)
    return Verdict(kind=VerdictKind.PROMOTED, reason=comparison.reason, comparison=comparison,
                   invariants=tuple(checks), **common)
