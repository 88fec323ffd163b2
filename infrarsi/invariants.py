"""Invariants that a candidate which skips work cannot pass: counted work, trainable set, numerics.

The baseline's witnessed repeats (and one run in a lower dtype, where the
contract lets the dtype change) become a :class:`WorkReference`; each
witnessed candidate trial is held against it. Every check is an
:class:`InvariantCheck` naming what differs. Tolerances are module constants,
documented with their reasons in ``docs/trials.md`` ("Invariants").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from infrarsi.trial import Outcome, TrialRecord
from infrarsi.witness import WitnessReport


@dataclass(frozen=True, kw_only=True, slots=True)
class InvariantCheck:
    name: str
    ok: bool
    detail: str


# torch.testing.assert_close's defaults per dtype (rtol, atol): the starting point for one operation.
ASSERT_CLOSE = {"float64": (1e-7, 1e-7), "float32": (1.3e-6, 1e-5), "bfloat16": (1.6e-2, 1e-5),
                "float16": (1e-3, 1e-5)}
# Lower precision ranks higher; a candidate is judged at the lowest precision its matrix products used.
PRECISION = {"float64": 0, "float32": 1, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 3, "float8_e5m2": 3}
# A whole step is thousands of operations: re-associating them (fused kernels, other micro-batch sizes,
# SDPA instead of explicit matmuls) moves fp32 results by far more than one op's rtol. Floors from the
# fixtures (docs/trials.md): honest fp32 changes moved the step-1 gradient vector by <= 7e-8 and the loss
# by far less than 2e-5; the weight update moves more, because a contract's own knob may change the
# function slightly (tinymoe's balancing loss is per micro-batch: micro_batch 2 -> 4 moved the update
# 1.3e-2), while cheats that keep step 1 intact moved it by >= 0.15.
FLOOR = {"first_loss": 2e-5, "grad": 5e-4, "update": 5e-2}
# A dtype change may move a figure this many times what the doctor measured it to move.
DTYPE_MARGIN = 3.0
# The deviation the doctor measured for a legitimate re-split of the global batch into micro-batches (a
# coupled pair off its default): dropout masks and other random draws follow the micro-batches, so a model
# with dropout computes the same step with other noise (HF GPT-2: step-1 gradients 6% apart).
SPLIT = "split"
# Run-to-run spread of the baseline counts this many standard deviations (as the loss band does).
SIGMAS = 4.0
# Counted FLOPs are derived from operator shapes, so honest rewrites (fusion, SDPA, bf16, micro-batching,
# compile) count the same or more (checkpointing recomputes); 1% absorbs shape-formula differences between
# attention kernels. Less than that is less work.
FLOP_TOLERANCE = 0.01


@dataclass(frozen=True, kw_only=True, slots=True)
class DtypeDeviation:
    """How far one baseline run in ``dtype`` landed from the baseline's mean (relative), per figure."""

    dtype: str
    first_loss: float
    grad: float
    update: float
    loss: tuple[float, ...] = ()  # per measured step

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "first_loss": self.first_loss, "grad": self.grad, "update": self.update,
                "loss": list(self.loss)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> DtypeDeviation:
        return DtypeDeviation(dtype=str(d["dtype"]), first_loss=float(d["first_loss"]), grad=float(d["grad"]),
                              update=float(d["update"]), loss=tuple(float(v) for v in d.get("loss") or ()))


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkReference:
    """The baseline's witnessed facts from several repeats: what a candidate must reproduce."""

    reports: tuple[WitnessReport, ...]
    first_loss: tuple[float, ...]  # per repeat, the loss of step 1
    allowed_dtypes: tuple[str, ...]  # matmul dtypes the contract permits (the baseline's and its dtype knob's)
    deviations: tuple[DtypeDeviation, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"reports": [r.to_dict() for r in self.reports], "first_loss": list(self.first_loss),
                "allowed_dtypes": list(self.allowed_dtypes), "deviations": [d.to_dict() for d in self.deviations]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> WorkReference:
        return WorkReference(reports=tuple(WitnessReport.from_dict(r) for r in d["reports"]),
                             first_loss=tuple(float(v) for v in d["first_loss"]),
                             allowed_dtypes=tuple(d["allowed_dtypes"]),
                             deviations=tuple(DtypeDeviation.from_dict(x) for x in d.get("deviations") or ()))

    @property
    def flops(self) -> int | None:
        counted = [r.flops for r in self.reports if r.flops is not None]
        return min(counted) if counted else None


def lowest_precision(dtypes: Sequence[str]) -> str:
    known = [d for d in dtypes if d in PRECISION]
    return max(known, key=lambda d: PRECISION[d]) if known else "float32"


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values)


def _sd(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def _filled(values: Sequence[float | None]) -> list[float]:
    """Gradient norms with "no gradient" as 0 (the trainable check has already compared which are missing)."""
    return [0.0 if v is None else v for v in values]


def _means(reference: Sequence[Sequence[float | None]], n: int) -> list[float]:
    return [_mean([r[i] for r in reference if r[i] is not None]) if any(r[i] is not None for r in reference)
            else 0.0 for i in range(n)]


def vector_deviation(values: Sequence[float], reference: Sequence[Sequence[float]]) -> float:
    """||value - mean|| / ||mean|| over all entries: how far the whole update moved (the weight fingerprint).

    Per-entry ratios are useless here: an Adam update of a parameter whose gradient is near zero is
    sign noise, and bf16 flips it; the vector is dominated by the parameters that really moved."""
    means = _means(reference, len(values))
    scale = math.sqrt(sum(m * m for m in means))
    diff = math.sqrt(sum((v - m) ** 2 for v, m in zip(values, means)))
    return diff / scale if scale else diff


def dtype_deviation(report: WitnessReport, first_loss: float, loss: Sequence[float], reference: WorkReference,
                    base_loss: Sequence[Sequence[float]], dtype: str) -> DtypeDeviation:
    """What running the baseline in ``dtype`` moved, against the reference's mean (the doctor's measurement)."""
    means = [_mean([run[i] for run in base_loss]) for i in range(min(len(loss), *(len(r) for r in base_loss)))] \
        if base_loss else []
    return DtypeDeviation(
        dtype=dtype, first_loss=_rel(first_loss, _mean(reference.first_loss)),
        grad=vector_deviation(_filled(report.grad_norms), [_filled(r.grad_norms) for r in reference.reports]),
        update=vector_deviation(report.update_proj, [r.update_proj for r in reference.reports]),
        loss=tuple(_rel(v, m) for v, m in zip(loss, means)))


def tolerance(reference: WorkReference, dtype: str, figure: str, *, split: bool = False) -> float:
    """The relative tolerance for ``figure`` of a candidate computing in ``dtype``: the largest of
    assert_close's rtol for that dtype, the step floor, and (for a dtype the doctor ran) the margin times
    the deviation it measured; for a candidate that re-splits the global batch (``split``), also the margin
    times what the doctor's re-split baseline moved."""
    tol = max(ASSERT_CLOSE.get(dtype, ASSERT_CLOSE["float32"])[0], FLOOR[figure])
    if split:
        tol = max([tol] + [DTYPE_MARGIN * getattr(d, figure) for d in reference.deviations if d.dtype == SPLIT])
    base = lowest_precision(reference.reports[0].matmul_dtypes) if reference.reports else "float32"
    if PRECISION.get(dtype, 1) > PRECISION.get(base, 1):
        measured = [getattr(d, figure) for d in reference.deviations
                    if d.dtype != SPLIT and PRECISION.get(d.dtype, 1) >= PRECISION.get(dtype, 1)]
        if measured:
            tol = max(tol, DTYPE_MARGIN * max(measured))
    return tol


def _spread_rel(reference: Sequence[Sequence[float | None]], atol_share: float = 0.0) -> float:
    """The baseline's own run-to-run spread, relative per entry (with the same atol), SIGMAS wide."""
    if len(reference) < 2:
        return 0.0
    means = _means(reference, len(reference[0]))
    atol = atol_share * max((abs(m) for m in means), default=0.0)
    worst = 0.0
    for i, m in enumerate(means):
        vals = [r[i] for r in reference if r[i] is not None]
        if len(vals) > 1 and (abs(m) + atol):
            worst = max(worst, SIGMAS * _sd(vals) / (abs(m) + atol))
    return worst


def _vector_spread(reference: Sequence[Sequence[float]]) -> float:
    """SIGMAS times the baseline's run-to-run spread of the whole vector, relative to its norm."""
    if len(reference) < 2:
        return 0.0
    means = _means(reference, len(reference[0]))
    scale = math.sqrt(sum(m * m for m in means))
    var = sum(_sd([r[i] for r in reference]) ** 2 for i in range(len(means)))
    return SIGMAS * math.sqrt(var) / scale if scale else 0.0


def _fmt_flops(n: float) -> str:
    return f"{n / 1e9:.4g} GFLOP" if n >= 1e8 else f"{n / 1e6:.4g} MFLOP"


def work_invariants(report: WitnessReport, *, first_loss: float | None, steps_seen: int,
                    reference: WorkReference, trial: int | str = "?",
                    steps_at_report: int | None = None, split: bool = False,
                    steps_per_line: int = 1) -> list[InvariantCheck]:
    """Each invariant of one witnessed candidate trial against the baseline's reference.

    A report written before exit (the bot stops a long job after its measured steps) is held to at least the
    step lines that had arrived when it was written (``steps_at_report``), give or take the one whose line is
    printed after its optimizer step, and at most every line that arrived; one written on SIGTERM is not held to the baseline's count, which
    then depends on when the signal came. A job that prints a line every ``steps_per_line`` optimizer steps
    (minGPT: every 10) is held to that many steps per line, give or take one line's worth."""
    t = f"trial {trial}"
    base = reference.reports[0]
    checks: list[InvariantCheck] = []

    early = report.at != "exit" and steps_at_report is not None
    lines = steps_at_report if early else steps_seen
    k = max(1, steps_per_line)
    slack = k if early or k > 1 else 0
    # A line is stamped when the bot reads it, never before the job printed it: under load the reader trails
    # the job by several fast steps, so the lines stamped before the report are a floor on those printed by
    # then (held: fewer optimizer steps than lines is the step-line cheat) and every line that arrived is the
    # ceiling (seen in CI: 8 optimizer steps with 6 lines stamped before a report at step 8's end).
    ceiling = steps_seen if early else lines
    ok = lines * k - slack <= report.optimizer_steps <= max(lines, ceiling) * k + slack \
        and (report.at == "sigterm" or base.at == "sigterm" or report.optimizer_steps == base.optimizer_steps)
    checks.append(InvariantCheck(name="optimizer_steps", ok=ok, detail=(
        f"{t}: {report.optimizer_steps} optimizer steps for {lines} reported steps"
        + (f" of {k} optimizer steps each" if k > 1 else "")
        + (f" (when the witness reported, at {report.at})" if early else "")
        + f" (baseline {base.optimizer_steps})")))

    ref_flops = reference.flops
    if ref_flops:
        got = report.flops or 0
        short = (ref_flops - got) / ref_flops
        names = sorted({k for k, _ in report.flops_by_op} | {k for r in reference.reports for k, _ in r.flops_by_op})
        mine, theirs = dict(report.flops_by_op), dict(base.flops_by_op)
        diff = ", ".join(f"{n} {_fmt_flops(mine.get(n, 0))} vs {_fmt_flops(theirs.get(n, 0))}" for n in names
                         if mine.get(n, 0) != theirs.get(n, 0))
        checks.append(InvariantCheck(name="work", ok=short <= FLOP_TOLERANCE, detail=(
            f"{t}: counted {_fmt_flops(got)} per optimizer step (step {report.count_step}), baseline "
            f"{_fmt_flops(ref_flops)}: {-short:+.1%}" + (f" ({diff})" if diff else "")
            + ("" if short <= FLOP_TOLERANCE else f"; less work than the baseline beyond {FLOP_TOLERANCE:.0%}"))))

    dtype = lowest_precision(report.matmul_dtypes)
    extra = sorted(set(report.matmul_dtypes) - set(reference.allowed_dtypes))
    checks.append(InvariantCheck(name="precision", ok=not extra, detail=(
        f"{t}: matrix products ran in {', '.join(report.matmul_dtypes) or 'nothing counted'}"
        + (f"; the contract allows only {', '.join(reference.allowed_dtypes)}" if extra else ""))))

    same = (report.params, report.param_elements, report.with_grad) == (base.params, base.param_elements,
                                                                         base.with_grad)
    checks.append(InvariantCheck(name="trainable", ok=same, detail=(
        f"{t}: the optimizer holds {report.params} tensors ({report.param_elements:,} elements), "
        f"{report.with_grad} received a gradient; baseline {base.params} ({base.param_elements:,}), "
        f"{base.with_grad}")))
    if not same:
        return checks  # per-parameter figures are not comparable entry by entry

    problems = []
    if first_loss is not None and reference.first_loss:
        tol = max(tolerance(reference, dtype, "first_loss", split=split),
                  _spread_rel([[v] for v in reference.first_loss]))
        dev = _rel(first_loss, _mean(reference.first_loss))
        if not dev <= tol:
            problems.append(f"step-1 loss {first_loss:.6g} vs {_mean(reference.first_loss):.6g} "
                            f"({dev:.2e} > {tol:.1e} relative)")
    grads = [_filled(r.grad_norms) for r in reference.reports]
    tol = max(tolerance(reference, dtype, "grad", split=split), _vector_spread(grads))
    dev = vector_deviation(_filled(report.grad_norms), grads)
    if not dev <= tol:
        problems.append(f"step-1 gradient norms off by {dev:.2e} relative (tolerance {tol:.1e})")
    checks.append(InvariantCheck(name="first_step", ok=not problems, detail=(
        f"{t}: " + ("; ".join(problems) if problems else f"step-1 loss and {report.with_grad} gradient norms match "
                    f"the baseline ({dtype}; gradients off by {dev:.1e}, tolerance {tol:.1e})"))))

    updates = [r.update_proj for r in reference.reports]
    tol = max(tolerance(reference, dtype, "update", split=split), _vector_spread(updates))
    dev = vector_deviation(report.update_proj, updates)
    norms = vector_deviation(report.weight_norms, [r.weight_norms for r in reference.reports])
    ok = dev <= tol and norms <= tol and len(report.update_proj) == len(base.update_proj)
    checks.append(InvariantCheck(name="weights", ok=ok, detail=(
        f"{t}: after {report.optimizer_steps} steps the weight update differs by {dev:.2e} and the weight norms "
        f"by {norms:.2e} relative (tolerance {tol:.1e})")))
    return checks



def first_loss(record: TrialRecord) -> float | None:
    """The loss the job reported for its first step (a warm-up step when there is one)."""
    m = record.metrics
    values = m.warmup_loss or m.loss
    return values[0] if values else None


def witnessed_report(record: TrialRecord) -> WitnessReport | None:
    return WitnessReport.from_dict(record.metrics.witness) if record.metrics.witness else None


def build_reference(records: Sequence[TrialRecord], *, allowed_dtypes: Sequence[str],
                    lower: Sequence[tuple[str, TrialRecord]] = ()) -> WorkReference | None:
    """The reference from the baseline's witnessed repeats, with the deviation of each ``(dtype, run)``."""
    good = [r for r in records if r.outcome is Outcome.OK and r.metrics.witness]
    if not good:
        return None
    reports = tuple(WitnessReport.from_dict(r.metrics.witness) for r in good)  # type: ignore[arg-type]
    losses = tuple(v for v in (first_loss(r) for r in good) if v is not None)
    allowed = tuple(sorted(set(allowed_dtypes) | {d for r in reports for d in r.matmul_dtypes}))
    reference = WorkReference(reports=reports, first_loss=losses, allowed_dtypes=allowed)
    deviations = []
    for dtype, run in lower:
        report = witnessed_report(run)
        loss = first_loss(run)
        if run.outcome is Outcome.OK and report is not None and loss is not None:
            deviations.append(dtype_deviation(report, loss, run.metrics.loss, reference,
                                              [r.metrics.loss for r in good], dtype))
    return WorkReference(reports=reports, first_loss=losses, allowed_dtypes=allowed, deviations=tuple(deviations))


def record_invariants(record: TrialRecord, reference: WorkReference, *,
                      printed_loss: bool = True) -> list[InvariantCheck]:
    """The work invariants of one finished trial (its outcome already says whether the witness is trusted);
    without ``printed_loss`` the step-1 check holds its gradients only (:func:`infrarsi.verify.trial_invariants`)."""
    report = witnessed_report(record)
    if report is None:
        return [InvariantCheck(name="witness", ok=False,
                               detail=f"trial {record.trial_no}: no witness report (the trial was not witnessed)")]
    return work_invariants(report, first_loss=first_loss(record) if printed_loss else None,
                           steps_seen=record.metrics.steps_seen, split=not printed_loss,
                           steps_at_report=record.metrics.steps_at_witness,
                           steps_per_line=record.metrics.steps_per_line,
                           reference=reference, trial=record.trial_no)
