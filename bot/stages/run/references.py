"""What each candidate is held to: the baseline's witnessed reference, taken at the candidate's own split.

A candidate that splits the global batch into micro-batches differently
(``micro_batch`` 2 -> 4 with accumulation 4 -> 2) computes the same step, but
not the same numbers: dropout masks and other random draws follow the
micro-batches, and many jobs print the last micro-batch's loss. Widening the
tolerances by what the doctor saw a re-split move lets real cheats through (on
a GPT-2 with dropout, step-1 gradients moved 125%: a doubled learning rate
passed). Instead the baseline itself is run, witnessed, at the candidate's
split — the contract's own knobs, no patch — and the candidate is held to that
at the same strict tolerances as any other candidate: the same masks, the same
printed loss. The split baseline in turn is held to the doctor's baseline on
everything a split cannot change (optimizer steps, counted work, precision,
trainable set): the ``split_reference`` row.

References are measured once per split and run (``runs/<run>/split-<digest>.json``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from bot.stages.doctor.baseline import baseline_band
from bot.stages.run.candidate import TrialContext
from infrarsi.parallel.roles import find_roles
from infrarsi.contract.model import Contract, KnobValue
from infrarsi.decisions import moved_decisions
from infrarsi.doctor import DoctorReport, allowed_dtypes, band_for
from infrarsi.invariants import InvariantCheck, WorkReference, build_reference, compared, not_checked, witnessed_report
from infrarsi.invariants import work_invariants
from infrarsi.loss_band import LossBand
from infrarsi.rundir import RunDir, read_json, write_json
from infrarsi.trial_record import Candidate, Outcome, TrialRecord
from infrarsi.verdict import Reference

#: Witnessed runs of the baseline at a split: two, so that its own run-to-run spread is measured.
SPLIT_REPEATS = 2
#: What a split cannot change, checked for the split baseline against the doctor's: the MoE routing first, so that a
#: split that drops other tokens (expert capacity counts the tokens of one forward) is named for that.
SPLIT_INVARIANT = ("moe", "optimizer_steps", "work", "precision", "trainable", "dropout")


def split_knobs(contract: Contract) -> tuple[str, ...]:
    """The knobs that choose how the global batch is split into micro-batches: a coupled pair (``product``
    constraint), a knob a ``divides`` constraint fixes the global batch for, and knobs named as the
    micro-batch or the gradient accumulation (Megatron-LM, DeepSpeed, HF, Lightning spellings)."""
    names = {n for c in contract.constraints if c.kind == "product" for n in c.knobs}
    names |= {c.knob for c in contract.constraints if c.kind == "divides" and c.knob}
    roles = find_roles(contract.knobs)
    names |= {roles[r] for r in ("micro_batch", "accumulation") if roles.get(r)}
    return tuple(sorted(n for n in names if any(k.name == n for k in contract.knobs)))


def candidate_split(contract: Contract, candidate: Candidate) -> dict[str, KnobValue]:
    """The split knobs ``candidate`` sets off their defaults (empty: it splits the batch as the baseline does)."""
    values = candidate.knob_dict()
    defaults = contract.defaults()
    return {n: values[n] for n in split_knobs(contract) if n in values and values[n] != defaults.get(n)}


@dataclass
class References:
    """The references of one run: the doctor's, and one per other split, measured when first needed."""

    ctx: TrialContext
    run_id: str
    doctor: DoctorReport
    progress: Callable[[str], None] = lambda _: None
    _split: dict[str, tuple[Reference, InvariantCheck]] = field(default_factory=dict)

    def baseline(self) -> Reference:
        missing = "" if self.doctor.work is not None else next(
            (n for n in self.doctor.notes if "witnessed" in n), "the doctor's baseline runs were not witnessed")
        band = band_for(self.doctor.loss_band, self.ctx.contract.timing) if self.doctor.loss_band else None
        return Reference(work=self.doctor.work, band=band, missing=missing, baseline_fails=_baseline_fails(self.doctor))

    def for_candidate(self, candidate: Candidate) -> tuple[Reference, tuple[InvariantCheck, ...]]:
        """The reference ``candidate`` is held to, and the ``split_reference`` row when it re-splits."""
        moved = moved_decisions(self.ctx.contract.knobs, candidate.knob_dict())
        split = candidate_split(self.ctx.contract, candidate)
        if not split:
            return replace(self.baseline(), moved=moved), ()
        baseline = Candidate.of({**self.ctx.contract.defaults(), **split})
        key = baseline.digest()
        if key not in self._split:
            self._split[key] = self._load(baseline) or self._measure(baseline, split)
        reference, row = self._split[key]
        return replace(reference, moved=moved, baseline_fails=_baseline_fails(self.doctor)), (row,)

    # -- measuring and keeping ---------------------------------------------------------------------------
    def _path(self, baseline: Candidate) -> Any:
        return RunDir(self.ctx.contract.root, self.run_id).split_reference_json(baseline.digest())

    def _load(self, baseline: Candidate) -> tuple[Reference, InvariantCheck] | None:
        data = read_json(self._path(baseline))
        if not data:
            return None
        work = WorkReference.from_dict(data["work"]) if data.get("work") else None
        band = LossBand.from_dict(data["band"]) if data.get("band") else None
        return (Reference(work=work, band=band, split=tuple(tuple(x) for x in data["split"]),
                          missing=str(data.get("missing", ""))),
                InvariantCheck.from_dict(data["row"]))

    def _measure(self, baseline: Candidate, split: dict[str, KnobValue]) -> tuple[Reference, InvariantCheck]:
        contract = self.ctx.contract
        text = ", ".join(f"{k}={v}" for k, v in sorted(split.items()))
        runs: list[TrialRecord] = []
        for i in range(SPLIT_REPEATS):
            self.progress(f"baseline at the candidate's split ({text}) {i + 1}/{SPLIT_REPEATS}: what it is held to")
            runs.append(self.ctx.run(self.run_id, baseline, witness=True))
        reference, row = split_reference(runs, doctor=self.doctor, contract=contract, split=split, text=text)
        write_json(self._path(baseline), {
            "split": [list(kv) for kv in reference.split], "trials": [r.trial_no for r in runs],
            "work": reference.work.to_dict() if reference.work else None,
            "band": reference.band.to_dict() if reference.band else None, "missing": reference.missing,
            "row": row.to_dict()})
        return reference, row


def _baseline_fails(doctor: DoctorReport) -> tuple[tuple[str, str], ...]:
    """The rows the doctor's baseline fails itself (a report read without them, or a stand-in: none)."""
    return tuple(getattr(doctor, "baseline_fails", ()) or ())


def split_reference(runs: list[TrialRecord], *, doctor: DoctorReport, contract: Contract,
                    split: dict[str, KnobValue], text: str) -> tuple[Reference, InvariantCheck]:
    """The reference from the witnessed baseline runs at a split, and how that split baseline compares with the
    doctor's on what no split may change (the doctor's dtype deviations carry over: they are per dtype, and
    were measured at one split against the same split)."""
    good = [r for r in runs if r.outcome is Outcome.OK and r.metrics.witness]
    items = tuple(sorted(split.items()))
    if not good:
        why = "; ".join(f"trial {r.trial_no}: {r.outcome.value} {r.reason[:160]}" for r in runs)
        missing = f"the baseline at {text} did not run witnessed ({why})"
        return (Reference(work=None, band=None, split=items, missing=missing), not_checked("split_reference", missing))
    work = build_reference(good, allowed_dtypes=allowed_dtypes(contract))
    assert work is not None
    deviations = tuple(doctor.work.deviations) if doctor.work is not None else ()
    work = replace(work, deviations=deviations)
    band = baseline_band(good, contract, work,
                         doctor.loss_band.dtype_deviation if doctor.loss_band is not None else ())
    if doctor.work is None:
        row = not_checked("split_reference", f"the baseline at {text} could not be compared with the doctor's "
                          "(no witnessed baseline)")
    else:
        first = good[0]
        report = witnessed_report(first)
        assert report is not None
        checks = [c for c in work_invariants(report, first_loss=None, steps_seen=first.metrics.steps_seen,
                                             steps_at_report=first.metrics.steps_at_witness,
                                             steps_per_line=first.metrics.steps_per_line, reference=doctor.work,
                                             trial=first.trial_no)
                  if c.name in SPLIT_INVARIANT and c.name not in dict(_baseline_fails(doctor))]
        checks.sort(key=lambda c: SPLIT_INVARIANT.index(c.name))
        broken = [c for c in checks if c.broken]
        row = compared("split_reference", not broken, (
            f"the baseline at {text} (the contract's own knobs, witnessed in trials "
            f"{', '.join(str(r.trial_no) for r in good)}) does what the doctor's baseline does: "
            + ", ".join(c.name for c in checks) + " as the doctor's; candidates at that split are held to it")
            if not broken else f"the baseline at {text} is not the same job as at the defaults: "
            + _split_reason(broken[0], checks))
    return Reference(work=work, band=band, split=items), row


def _split_reason(first: InvariantCheck, checks: list[InvariantCheck]) -> str:
    """Why a split baseline is another job, in the terms of what differs: an MoE layer's capacity counts the tokens
    of one forward, so another split drops other token assignments (the ``moe`` row names how many per step)."""
    if first.name == "moe":
        return f"expert capacity is computed per micro-batch, so this split drops other tokens: {first.detail}"
    moe = next((c for c in checks if c.name == "moe"), None)
    if first.name == "work" and moe is not None and moe.ok:
        return (f"{first.detail} (its MoE layers routed as the defaults' do — {moe.detail.split(': ', 1)[-1]} — "
                "so the difference is in how the split computes the dispatch, not in the tokens routed)")
    return first.detail
