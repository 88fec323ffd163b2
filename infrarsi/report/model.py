"""The report as one record built from the journal: the verified winner, every trial, what failure cost.

Pure: the bot gathers the inputs (run summary, doctor report, the run's trial
records, the contract's knobs, a few facts from git) and this module turns them
into a :class:`Report`. ``report.md``, ``report.json`` and the pull-request body
are all renderings of the same record, so they cannot disagree. A speedup is
only ever taken from a ``promoted`` verdict: the report never claims what
verification did not confirm.
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from infrarsi.contract.job_line import job_line
from infrarsi.contract.knob_codec import assignment_text
from infrarsi.contract.model import Knob, KnobValue
from infrarsi.doctor import DoctorReport
from infrarsi.dtypes import DTYPE_KNOB_NAMES, torch_name
from infrarsi.dtype_levers import for_doctor, precision_exclusions
from infrarsi.mfu import compute_dtype, mfu
from infrarsi.patches import PatchSpec
from infrarsi.report.precision_change import precision_change
from infrarsi.run_summary import RunSummary
from infrarsi.trial_record import QUARANTINED, Candidate, Outcome, TrialRecord, median_bytes
from infrarsi.verdict import TEST, Verdict

REPORT_VERSION = 1
# Main effects shown under "Model calibration": the winner's, then the largest revisions, at most this many;
# then at most CALIBRATION_INTERACTIONS interaction/curvature terms, only those that moved by more than the noise.
CALIBRATION_ROWS = 12
CALIBRATION_INTERACTIONS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class KnobChange:
    name: str
    old: KnobValue
    new: KnobValue
    where: str  # how the job receives it: "--dtype flag of train.py", "env INFRARSI_X"


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceChange:
    """One audited definition a code patch changed."""

    path: str
    symbol: str
    line_start: int | None
    line_end: int | None
    lines_added: int
    lines_removed: int


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchChange:
    """One patch of the winner: its hunks (the audited definitions it changed) and who proposed it.

    ``author`` is ``catalog`` (a built-in codemod) or ``model <name>`` (a proposer's replacement);
    ``rationale`` and ``evidence`` are the proposer's own words, ``source`` a replacement's full code."""

    patch_id: str
    sources: tuple[SourceChange, ...]
    author: str = ""
    title: str = ""
    rationale: str = ""
    evidence: str = ""
    source: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Quarantined:
    """A patch that added what a speed patch never needs: never run, left for a person, each line named."""

    patches: tuple[str, ...]
    when: str  # "when proposed", or "trial 12"
    findings: tuple[str, ...]  # ``train.py:41: os.dup2 (low-level fd trick: ...)``


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialRow:
    trial_no: int
    candidate: str
    outcome: str
    reason: str
    step_time_s: float | None
    peak_mem_bytes: int | None
    cost_s: float
    stage: str  # doctor, search, verify
    gpu_peak_bytes: int | None = None  # the GPU allocator's peak (TrialMetrics.device_peak_mem_bytes)
    gpu_oom: bool = False  # it ran out of GPU memory (TrialMetrics.device_peak_censored)


@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrationRow:
    effect: str
    prior_ratio: float  # exp(prior mean): the multiplicative effect on step time believed before the run
    prior_sd: float
    posterior_ratio: float
    posterior_sd: float
    in_winner: bool
    kind: str = "main"  # "main", or "interaction" (a product or square term that moved more than the noise)
    noise: float = 0.0  # the time model's residual sd (log units) the interaction terms were held to


@dataclass(frozen=True, kw_only=True, slots=True)
class Invariant:
    name: str
    ok: bool
    detail: str
    status: str = ""  # "ok", "broken", "not_checked" (empty: a report written before rows had one)
    waived: bool = False  # not checked, and the contract's [verify] waive says so
    baseline_fails: bool = False  # not checked: the baseline's own repeats fail it (the doctor's A/A check)


@dataclass(frozen=True, kw_only=True, slots=True)
class Verification:
    verdict: str
    reason: str
    candidate: str
    baseline_step_s: tuple[float, ...]
    candidate_step_s: tuple[float, ...]
    baseline_trials: tuple[int, ...]
    candidate_trials: tuple[int, ...]
    p_value: float | None
    ci: tuple[float, float] | None
    ci_level: float | None
    test: str
    speedup: float | None
    invariants: tuple[Invariant, ...]
    pairs: int = 0  # A/B pairs the verification ran
    stop: str = ""  # why it stopped: efficacy, futility, max_pairs, fixed, invariant
    reruns: tuple[int, ...] = ()  # runs disturbed from outside and run again instead of counted


@dataclass(frozen=True, kw_only=True, slots=True)
class RepoFacts:
    """What the bot read from git and the contract for the report (the engine never opens a repo)."""

    repo: str  # a name for humans
    base_commit: str | None = None
    winner_commit: str | None = None
    winner_branch: str | None = None
    diff_link: str | None = None  # where a reader sees the winner's diff (a file, a compare URL)
    entry: str = "train.py"


@dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    version: int = REPORT_VERSION
    run_id: str
    repo: str
    created_at: float
    base_commit: str | None
    hardware: dict[str, Any]
    promoted: bool  # a verified winner exists
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    ci_level: float | None
    p_value: float | None
    step_time_before_s: float
    step_time_after_s: float | None
    mfu_before: float | None
    mfu_after: float | None
    peak_mem_before_bytes: int | None
    peak_mem_after_bytes: int | None
    winner: str | None  # the candidate, described
    winner_digest: str | None
    winner_knobs: dict[str, KnobValue] = field(default_factory=dict)
    winner_patches: tuple[str, ...] = ()
    winner_commit: str | None = None
    winner_branch: str | None = None
    diff_link: str | None = None
    knob_changes: tuple[KnobChange, ...] = ()
    patches: tuple[PatchChange, ...] = ()
    verification: Verification | None = None
    other_verdicts: tuple[Verification, ...] = ()
    trials: tuple[TrialRow, ...] = ()
    failed_cost_s: float = 0.0
    total_cost_s: float = 0.0
    oom: tuple[TrialRow, ...] = ()
    calibration: tuple[CalibrationRow, ...] = ()
    # what the search blamed its failed trials on (infrarsi.search.crash_suspects): (setting, failures, blame)
    crash_suspects: tuple[tuple[str, int, float], ...] = ()
    reproduce: dict[str, str] = field(default_factory=dict)
    llm: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    mfu_before_dtype: str | None = None  # the dtype whose measured peak each MFU is against
    mfu_after_dtype: str | None = None
    mfu_defects: tuple[str, ...] = ()  # an impossible MFU is reported here, never as a figure
    memory_limit_bytes: int | None = None  # the contract's, for the memory chart
    # On a GPU: the allocator's peak (median over ok trials), and what it could grow to (TrialMetrics.device_*)
    gpu_peak_before_bytes: int | None = None
    gpu_peak_after_bytes: int | None = None
    gpu_capacity_bytes: int | None = None
    quarantined: tuple[Quarantined, ...] = ()  # patches left for a person (bot/patching/suspicious.py)
    precision_change: str | None = None  # the winner computes in a lower precision than the baseline: said in words

    @property
    def change_summary(self) -> str:
        """What the winner changes, briefly: ``dtype fp32→bf16, +fused_gelu``."""
        parts = [f"{c.name} {c.old}→{c.new}" for c in self.knob_changes] + [f"+{p}" for p in self.winner_patches]
        return ", ".join(parts) or "no change"

    @property
    def failed(self) -> tuple[TrialRow, ...]:
        return tuple(t for t in self.trials if t.outcome != Outcome.OK.value)

    @property
    def audit(self) -> tuple[SourceChange, ...]:
        return tuple(s for p in self.patches for s in p.sources)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["failed_trials"] = [asdict(t) for t in self.failed]
        data["audit"] = [asdict(s) | {"patch": p.patch_id} for p in self.patches for s in p.sources]
        return data


def where_set(knob: Knob, entry: str) -> str:
    if knob.env is not None:
        return f"environment variable {knob.env}"
    if knob.override is not None:
        return f"{knob.override} override of {entry}"
    if knob.flag is not None:
        return f"{knob.flag} {'switch' if knob.switch else 'flag'} of {entry}"
    return "the contract"


def command_line(command: Sequence[str], args: Sequence[str], knobs: Sequence[Knob],
                 values: Mapping[str, KnobValue], *, workdir: str = ".",
                 env: Sequence[tuple[str, str]] = ()) -> str:
    """The shell command that launches the job with ``values`` (every knob explicit, as a trial does), from the
    repo's root: ``cd WORKDIR && VAR=value python ...`` where the workload has a working directory of its own."""
    line = job_line(command, args, knobs, values, fixed_env=tuple(env)).shell()
    return line if workdir in ("", ".") else f"cd {shlex.quote(workdir)} && {line}"


def _knob(knobs: Sequence[Knob], name: str) -> Knob:
    return next(k for k in knobs if k.name == name)


def _row(r: TrialRecord, stage: str) -> TrialRow:
    return TrialRow(trial_no=r.trial_no, candidate=r.candidate.describe(), outcome=r.outcome.value, reason=r.reason,
                    step_time_s=r.metrics.step_time_s, peak_mem_bytes=r.metrics.peak_mem_bytes, cost_s=r.cost_s,
                    stage=stage, gpu_peak_bytes=r.metrics.device_peak_mem_bytes,
                    gpu_oom=r.metrics.device_peak_censored)


def _verification(v: Verdict) -> Verification:
    c = v.comparison
    return Verification(verdict=v.kind.value, reason=v.reason, candidate=v.candidate.describe(),
                        baseline_step_s=v.baseline_step_s, candidate_step_s=v.candidate_step_s,
                        baseline_trials=v.baseline_trials, candidate_trials=v.candidate_trials,
                        p_value=c.p_value if c else None, ci=(c.ci_low, c.ci_high) if c else None,
                        ci_level=c.ci_level if c else None, test=TEST, speedup=v.speedup,
                        invariants=tuple(Invariant(name=i.name, ok=i.ok, detail=i.detail, status=i.status.value,
                                                   waived=i.waived, baseline_fails=i.baseline_fails)
                                         for i in v.invariants),
                        pairs=v.pairs, stop=v.stop, reruns=v.reruns)


def _sources(records: Sequence[TrialRecord]) -> tuple[SourceChange, ...]:
    for r in records:
        if r.audit:
            return tuple(SourceChange(path=a["path"], symbol=a["symbol"], line_start=a.get("line_start"),
                                      line_end=a.get("line_end"), lines_added=int(a.get("lines_added", 0)),
                                      lines_removed=int(a.get("lines_removed", 0)))
                         for a in r.audit if a.get("kind", "change") == "change")
    return ()


def quarantined_patches(records: Sequence[TrialRecord], llm: Mapping[str, Any] | None) -> tuple[Quarantined, ...]:
    """Patches quarantined when proposed (the model's, from run.json) and candidates quarantined before their
    trial's commit (their audit entries of kind ``quarantined``), each patch set once."""
    out: dict[tuple[str, ...], Quarantined] = {}
    for p in (llm or {}).get("patches_proposed") or ():
        if p.get("status") == "quarantined":
            out[(str(p["id"]),)] = Quarantined(patches=(str(p["id"]),), when="when proposed",
                                               findings=tuple(str(p.get("reason") or "").split("; ")))
    for r in sorted(records, key=lambda r: r.trial_no):
        if r.outcome is Outcome.REJECTED and r.reason.startswith(QUARANTINED) and r.candidate.patches not in out:
            lines = tuple(f"{a['path']}:{a['line']}: {a['construct']} ({a['why']})" for a in r.audit
                          if a.get("kind") == "quarantined")
            out[r.candidate.patches] = Quarantined(patches=r.candidate.patches, when=f"trial {r.trial_no}",
                                                   findings=lines or (r.reason.removeprefix(QUARANTINED),))
    return tuple(out.values())


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchInfo:
    """What the report says about one patch besides its hunks (who proposed it, why, its code)."""

    targets: tuple[str, ...] = ()
    author: str = ""
    title: str = ""
    rationale: str = ""
    evidence: str = ""
    source: str | None = None


def patch_infos(llm: Mapping[str, Any] | None, catalog: Mapping[str, Any] | None = None) -> dict[str, PatchInfo]:
    """Each known patch's info: the model's proposals from run.json (``llm.patches_proposed``), the
    catalog's specs (``PatchSpec``-like: targets, title, rationale) for the rest."""
    out: dict[str, PatchInfo] = {}
    for pid, spec in (catalog or {}).items():
        out[pid] = PatchInfo(targets=tuple(spec.targets), author="catalog", title=spec.title,
                             rationale=spec.rationale, source=spec.replacement)
    llm = llm or {}
    for p in llm.get("patches_proposed") or ():
        spec = p.get("spec") or {}
        out[p["id"]] = PatchInfo(targets=tuple(p.get("targets") or spec.get("targets") or ()),
                                 author=f"model {llm.get('model') or llm.get('proposer') or ''}".strip(),
                                 title=str(p.get("title") or ""), rationale=str(p.get("rationale") or ""),
                                 evidence=str(p.get("evidence") or ""), source=spec.get("replacement"))
    return out


def _mine(s: SourceChange, targets: Sequence[str]) -> bool:
    here = f"{s.path}::{s.symbol.split('#', 1)[0]}"
    return any(t == s.path or t == here or here.startswith(f"{t}.") for t in targets)


def _patch_changes(patches: Sequence[str], sources: tuple[SourceChange, ...],
                   infos: Mapping[str, PatchInfo]) -> tuple[PatchChange, ...]:
    """Attribute each audited change to the patch whose targets name it (one patch: all of them).

    Patches in one candidate never change the same symbol (the one conflict rule, infrarsi/conflicts.py),
    so a change has at most one owner; one that no target names is listed under ``(unattributed)``,
    never credited to a patch that did not make it."""
    def change(pid: str, mine: tuple[SourceChange, ...]) -> PatchChange:
        info = infos.get(pid, PatchInfo())
        return PatchChange(patch_id=pid, sources=mine, author=info.author, title=info.title,
                           rationale=info.rationale, evidence=info.evidence, source=info.source)

    if len(patches) == 1:
        return (change(patches[0], sources),)
    out = []
    claimed: set[int] = set()
    for pid in patches:
        mine = [s for i, s in enumerate(sources) if i not in claimed and _mine(s, infos.get(pid, PatchInfo()).targets)]
        claimed.update(i for i, s in enumerate(sources) if s in mine)
        out.append(change(pid, tuple(mine)))
    rest = tuple(s for i, s in enumerate(sources) if i not in claimed)
    if rest and out:
        out.append(PatchChange(patch_id="(unattributed)", sources=rest,
                               rationale="audited changes that no patch's targets name"))
    return tuple(out)


def winner_features(winner: Candidate | None, knobs: Sequence[Knob]) -> frozenset[str]:
    """The main features the winner switches on, named as the search's model names them
    (``dtype=bf16``, ``micro_batch``, ``patch:fused_gelu``): every one is non-zero at the winner."""
    if winner is None:
        return frozenset()
    defaults = {k.name: k for k in knobs}
    out = {f"patch:{p}" for p in winner.patches}
    for name, value in winner.knobs:
        knob = defaults.get(name)
        if knob is not None and value == knob.default and isinstance(value, bool) == isinstance(knob.default, bool):
            continue  # at its default a knob's features are all zero
        out.add(assignment_text(name, value))  # one-hot level
        out.add(name)  # ordered knob (log2 or linear encoding): non-zero away from the default
    return frozenset(out)


def feature_parts(feature: str, mains: frozenset[str]) -> tuple[str, ...]:
    """The main features a model term multiplies: itself, ``x`` of ``x^2``, ``a`` and ``b`` of ``a*b``."""
    if feature in mains:
        return (feature,)
    if feature.endswith("^2") and feature[:-2] in mains:
        return (feature[:-2],)
    for i, ch in enumerate(feature):
        if ch == "*" and feature[:i] in mains and feature[i + 1:] in mains:
            return feature[:i], feature[i + 1:]
    return (feature,)


def _is_main(feature: str, names: set[str]) -> bool:
    if feature.endswith("^2") and feature[:-2] in names:
        return False
    return not any(ch == "*" and feature[:i] in names and feature[i + 1:] in names for i, ch in enumerate(feature))


def _crash_suspects(posterior: Mapping[str, Any] | None) -> tuple[tuple[str, int, float], ...]:
    rows = (posterior or {}).get("crash_suspects") or ()
    return tuple((str(r["setting"]), int(r["failures"]), float(r["blame"])) for r in rows)


def _calibration(posterior: Mapping[str, Any] | None, winner: Candidate | None,
                 knobs: Sequence[Knob] = ()) -> tuple[CalibrationRow, ...]:
    """Main effects first (the winner's, then the most revised), then the interaction and curvature terms whose
    posterior moved from their prior by more than the time model's noise; "in the winner" is whether the term
    is non-zero at the winner's candidate."""
    import math

    rows = [r for r in (posterior or {}).get("time_effects") or () if not str(r["feature"]).startswith("(")]
    if not rows:
        return ()
    names = {str(r["feature"]) for r in rows}
    mains = frozenset(n for n in names if _is_main(n, names))
    on = winner_features(winner, knobs)
    noise = float((posterior or {}).get("time_sigma") or 0.0)

    def mine(feature: str) -> bool:
        return winner is not None and all(p in on for p in feature_parts(feature, mains))

    def shift(r: Mapping[str, Any]) -> float:
        return abs(float(r["post_mean"]) - float(r["prior_mean"]))

    main_rows = sorted((r for r in rows if r["feature"] in mains), key=lambda r: (not mine(r["feature"]), -shift(r)))
    moved = sorted((r for r in rows if r["feature"] not in mains and shift(r) > noise), key=lambda r: -shift(r))
    chosen = [(r, "main") for r in main_rows[:CALIBRATION_ROWS]] + [(r, "interaction") for r in
                                                                   moved[:CALIBRATION_INTERACTIONS]]
    return tuple(CalibrationRow(effect=r["feature"], prior_ratio=math.exp(r["prior_mean"]), prior_sd=r["prior_sd"],
                                posterior_ratio=math.exp(r["post_mean"]), posterior_sd=r["post_sd"],
                                in_winner=mine(r["feature"]), kind=kind, noise=noise)
                 for r, kind in chosen)


@dataclass(frozen=True, kw_only=True, slots=True)
class MfuFigures:
    before: float | None
    after: float | None
    before_dtype: str
    after_dtype: str
    defects: tuple[str, ...]


def winner_dtype(records: Sequence[TrialRecord], winner: Candidate | None, knobs: Sequence[Knob],
                 fallback: str) -> str:
    """The dtype the winner computes in: what the witness saw its matrix products run in, else its dtype knob."""
    seen = [d for r in records if r.metrics.witness for d in r.metrics.witness.get("matmul_dtypes") or ()]
    if seen:
        return compute_dtype(seen, fallback=fallback)
    if winner is not None:
        for name, value in winner.knobs:
            if name in DTYPE_KNOB_NAMES and isinstance(value, str):
                named = torch_name(value)
                if named:
                    return compute_dtype([named], fallback=fallback)
    return fallback


def mfu_figures(doctor: DoctorReport, *, before_s: float, after_s: float | None,
                winner_records: Sequence[TrialRecord], winner: Candidate | None,
                knobs: Sequence[Knob]) -> MfuFigures:
    """MFU before and after from the baseline's model FLOPs, each arm's step time and its own dtype's peak."""
    before_dtype = doctor.baseline_dtype
    after_dtype = winner_dtype(winner_records, winner, knobs, before_dtype)
    flops = doctor.model_flops_per_step
    if not flops:
        return MfuFigures(before=None, after=None, before_dtype=before_dtype, after_dtype=after_dtype, defects=())
    figures = [mfu(flops_per_step=flops, step_time_s=before_s, peaks=doctor.peak_flops, dtype=before_dtype)]
    if after_s:
        figures.append(mfu(flops_per_step=flops, step_time_s=after_s, peaks=doctor.peak_flops, dtype=after_dtype))
    defects = tuple(f"{arm}: {f.defect}" for arm, f in zip(("before", "after"), figures) if f.defect)
    return MfuFigures(before=figures[0].value, after=figures[1].value if len(figures) > 1 else None,
                      before_dtype=figures[0].dtype, after_dtype=figures[-1].dtype if after_s else after_dtype,
                      defects=defects)


def build_report(*, run: RunSummary, doctor: DoctorReport, records: Sequence[TrialRecord],
                 knobs: Sequence[Knob], command: Sequence[str], args: Sequence[str], facts: RepoFacts,
                 created_at: float, patch_targets: Mapping[str, Sequence[str]] | None = None,
                 patch_specs: Mapping[str, Any] | None = None, workdir: str = ".",
                 env: Sequence[tuple[str, str]] = (), precision_allow: Sequence[str] = ()) -> Report:
    """The report of one run. ``records`` are every trial of the run in the journal (doctor, search, verify).

    ``patch_specs`` (the catalog's ``PatchSpec``s) name the catalog patches' targets and words; the
    model's patches come from run.json. ``patch_targets`` is the older form (targets only)."""
    by_no = {r.trial_no: r for r in records}
    search_nos = {t.trial_no for t in run.trials}
    control_nos = {t.trial_no for t in run.controls}
    doctor_nos = doctor.own_trials

    def stage(no: int) -> str:
        return "doctor" if no in doctor_nos else "search" if no in search_nos else \
            "control" if no in control_nos else "verify"

    rows = tuple(_row(r, stage(r.trial_no)) for r in sorted(records, key=lambda r: r.trial_no))
    failed = [r for r in rows if r.outcome != Outcome.OK.value]
    best = run.best
    verification = _verification(best) if best is not None else None
    others = tuple(_verification(v) for v in run.verdicts
                   if best is None or v.candidate.digest() != best.candidate.digest())
    defaults = {k.name: k.default for k in knobs}
    winner: Candidate | None = None
    if best is not None:
        # The records of its own verification trials hold the candidate exactly, whatever run.json kept.
        winner = next((r.candidate for r in records if r.trial_no in best.candidate_trials
                       or r.candidate.digest() == best.candidate.digest()), None)
    promoted = verification is not None and winner is not None and verification.speedup is not None
    speedup = verification.speedup if promoted and verification else None
    cand_records = [by_no[n] for n in verification.candidate_trials if n in by_no] if verification else []
    base_records = [by_no[n] for n in verification.baseline_trials if n in by_no] if verification else []
    winner_knobs = winner.knob_dict() if winner else {}
    changes = tuple(KnobChange(name=k.name, old=k.default, new=winner_knobs[k.name], where=where_set(k, facts.entry))
                    for k in knobs if k.name in winner_knobs and winner_knobs[k.name] != k.default)
    infos = {pid: PatchInfo(targets=tuple(t), author="catalog") for pid, t in (patch_targets or {}).items()}
    infos.update(patch_infos(run.llm, patch_specs))
    patches = _patch_changes(winner.patches, _sources(cand_records), infos) if winner else ()
    # Before and after come from the same interleaved verification, so they share the machine's state.
    before_s = statistics.median(verification.baseline_step_s) if promoted and verification \
        and verification.baseline_step_s else doctor.median_s
    after_s = statistics.median(verification.candidate_step_s) if promoted and verification else None
    mfu = mfu_figures(doctor, before_s=before_s, after_s=after_s, winner_records=cand_records, winner=winner,
                      knobs=knobs)
    values = {**defaults, **winner_knobs}
    reproduce = {"baseline": command_line(command, args, knobs, defaults, workdir=workdir, env=env)}
    if winner is not None:
        reproduce["candidate"] = command_line(command, args, knobs, values, workdir=workdir, env=env)
        reproduce["verify"] = "infrarsi verify . " + " ".join(
            [f"--knob {c.name}={_knob(knobs, c.name).codec.to_cli(c.new)}" for c in changes]
            + [f"--patch {p}" for p in winner.patches])
    notes = []
    if not promoted:
        notes.append("no candidate was verified faster than the baseline; nothing is proposed")
    if doctor.model_flops_per_step:
        notes.append(f"MFU: the baseline's model FLOPs per step ({doctor.model_flops_per_step:.3g}, from "
                     f"{doctor.model_flops_source.split(' (')[0]}) over each arm's step time, against this device's "
                     f"measured peak of the dtype its matrix products ran in (before {mfu.before_dtype}"
                     + (f", after {mfu.after_dtype}" if after_s else "") + ")")
    notes += [f"MFU defect: {d}" for d in mfu.defects]
    # What the search left out: a dtype the doctor measured as emulated here, or one the contract does not allow
    # (infrarsi/dtype_levers.py).
    specs = [s for s in (patch_specs or {}).values() if isinstance(s, PatchSpec)]
    left_out = for_doctor(knobs, specs, doctor.fingerprint, doctor.peak_flops).plus(
        precision_exclusions(specs, doctor.work.allowed_dtypes if doctor.work else ()))
    notes += [f"not searched: {n}" for n in left_out.notes]
    work = doctor.work
    change = precision_change(baseline=work.reports[0].matmul_dtypes if work and work.reports else (),
                              winner=cand_records, policy=precision_allow,
                              measured=tuple(d.dtype for d in work.deviations) if work else ()) if promoted else None
    return Report(
        run_id=run.run_id, repo=facts.repo, created_at=created_at, base_commit=facts.base_commit,
        hardware=dict(doctor.fingerprint), promoted=promoted, speedup=speedup,
        speedup_ci=verification.ci if promoted and verification else None,
        ci_level=verification.ci_level if promoted and verification else None,
        p_value=verification.p_value if promoted and verification else None,
        step_time_before_s=before_s, step_time_after_s=after_s, mfu_before=mfu.before, mfu_after=mfu.after,
        mfu_before_dtype=mfu.before_dtype, mfu_after_dtype=mfu.after_dtype if after_s else None,
        mfu_defects=mfu.defects, memory_limit_bytes=doctor.memory_limit_bytes,
        peak_mem_before_bytes=median_bytes(base_records, "peak_mem_bytes") or doctor.peak_mem_bytes,
        peak_mem_after_bytes=median_bytes(cand_records, "peak_mem_bytes"),
        gpu_peak_before_bytes=median_bytes(base_records, "device_peak_mem_bytes"),
        gpu_peak_after_bytes=median_bytes(cand_records, "device_peak_mem_bytes"),
        gpu_capacity_bytes=median_bytes([*base_records, *cand_records], "device_capacity_bytes"),
        winner=winner.describe() if winner else None, winner_digest=winner.digest() if winner else None,
        winner_knobs=winner_knobs, winner_patches=winner.patches if winner else (),
        winner_commit=facts.winner_commit, winner_branch=facts.winner_branch, diff_link=facts.diff_link,
        knob_changes=changes, patches=patches, verification=verification if promoted else None,
        other_verdicts=others, trials=rows, failed_cost_s=sum(r.cost_s for r in failed),
        total_cost_s=sum(r.cost_s for r in rows), oom=tuple(r for r in rows if r.outcome == Outcome.OOM.value),
        calibration=_calibration(run.posterior, winner, knobs), crash_suspects=_crash_suspects(run.posterior),
        reproduce=reproduce, quarantined=quarantined_patches(records, run.llm),
        llm=dict(run.llm) if run.llm else None, notes=tuple(notes), precision_change=change)
