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
from enum import StrEnum
from typing import Any, Collection, Sequence

from infrarsi.dtypes import PRECISION_RANK, lowest_precision
from infrarsi.lever_rows import lever_checks, moe_expected_flops, routing_deviation
from infrarsi.witnessed_settings import fp32_precision, math_problems, optimizer_problems
from infrarsi.trial_record import Outcome, TrialRecord
from infrarsi.witness import WitnessReport


class CheckStatus(StrEnum):
    OK = "ok"  # the comparison was made and held
    BROKEN = "broken"  # the comparison was made and failed
    NOT_CHECKED = "not_checked"  # the comparison could not be made (the detail says why): never read as ok


@dataclass(frozen=True, kw_only=True, slots=True)
class InvariantCheck:
    """One row of a verdict. ``waived``: not checked, and the contract's ``[verify] waive`` says that is fine.
    ``baseline_fails``: not checked, because the baseline's own witnessed repeats fail this row against each other
    (the doctor's A/A check): it can convict nothing on this job, and stops no promotion."""

    name: str
    status: CheckStatus
    detail: str
    waived: bool = False
    baseline_fails: bool = False

    @property
    def ok(self) -> bool:
        return self.status is CheckStatus.OK

    @property
    def broken(self) -> bool:
        return self.status is CheckStatus.BROKEN

    @property
    def checked(self) -> bool:
        return self.status is not CheckStatus.NOT_CHECKED

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "ok": self.ok, "detail": self.detail,
                "waived": self.waived, "baseline_fails": self.baseline_fails}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> InvariantCheck:
        """A row as ``to_dict`` wrote it; a row written before rows had a status reads ``ok`` as ok or broken."""
        status = CheckStatus(d["status"]) if "status" in d else (CheckStatus.OK if d.get("ok") else
                                                                  CheckStatus.BROKEN)
        return InvariantCheck(name=str(d["name"]), status=status, detail=str(d.get("detail", "")),
                              waived=bool(d.get("waived", False)), baseline_fails=bool(d.get("baseline_fails", False)))


def compared(name: str, ok: bool, detail: str) -> InvariantCheck:
    """A row whose comparison was made: ok or broken."""
    return InvariantCheck(name=name, status=CheckStatus.OK if ok else CheckStatus.BROKEN, detail=detail)


def not_checked(name: str, why: str) -> InvariantCheck:
    """A row whose comparison could not be made, and why (the bot's or the executor's limit, never the
    candidate's: that is broken)."""
    return InvariantCheck(name=name, status=CheckStatus.NOT_CHECKED, detail=why)


#: Rows a baseline that fails them excuses for nothing: the trial ran, and its step time is the bot's own.
NEVER_EXCUSED = ("outcome", "clock")


def excused(checks: Sequence[InvariantCheck], fails: Sequence[tuple[str, str]],
            trial: int | str | None = None) -> list[InvariantCheck]:
    """``checks`` with every row the baseline fails too (``fails``: the doctor's (row, why) pairs) made
    ``not checked`` with why: such a row compares nothing a candidate could be blamed for."""
    why = dict(fails)
    t = f"trial {trial}: " if trial is not None else ""
    return [InvariantCheck(name=c.name, status=CheckStatus.NOT_CHECKED, baseline_fails=True,
                           detail=f"{t}not checked: the baseline fails it too ({why[c.name]})")
            if c.name in why and c.name not in NEVER_EXCUSED else c for c in checks]


#: The rows a witnessed reference makes possible, in the order they are checked.
WITNESS_ROWS = ("optimizer_steps", "work", "precision", "trainable", "optimizer", "first_step", "weights")


# torch.testing.assert_close's defaults per dtype (rtol, atol): the starting point for one operation.
ASSERT_CLOSE = {"float64": (1e-7, 1e-7), "float32": (1.3e-6, 1e-5), "tf32": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
                "float16": (1e-3, 1e-5)}
# Lower precision ranks higher; a candidate is judged at the lowest precision its matrix products used.
# A whole step is thousands of operations: re-associating them (fused kernels, other micro-batch sizes,
# SDPA instead of explicit matmuls) moves fp32 results by far more than one op's rtol. Floors from the
# fixtures (docs/trials.md): honest fp32 changes moved the step-1 gradient vector by <= 7e-8 and the loss
# by far less than 2e-5; the weight update moves more, because a contract's own knob may change the
# function slightly (tinymoe's balancing loss is per micro-batch: micro_batch 2 -> 4 moved the update
# 1.3e-2), while cheats that keep step 1 intact moved it by >= 0.15.
# ``param_update``: each parameter's own update (its projections on a few random directions, relative to their
# size): a parameter whose update is off by a quarter is not the same training, however small its share of the
# whole vector (a frozen bias is 100% off); honest fp32 rewrites move it by far less than 1e-2.
FLOOR = {"first_loss": 2e-5, "grad": 5e-4, "update": 5e-2, "param_update": 0.25}
# A parameter whose baseline update is below this share of the largest one's is judged on that share: its own
# relative change means nothing (a row of zeros that only weight decay moves).
PARAM_ATOL = 1e-3
# A dtype change may move a figure this many times what the doctor measured it to move.
DTYPE_MARGIN = 3.0
# Written by doctors before re-split candidates were compared with a baseline at their own split
# (bot/stages/run/references.py): a deviation of that kind in an old doctor.json is ignored.
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
    param_update: float = 0.0  # the largest per-parameter update deviation (0: measured before it was kept)
    routing: float = 0.0  # how far an MoE layer's dropped share moved (infrarsi.lever_rows)

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "first_loss": self.first_loss, "grad": self.grad, "update": self.update,
                "loss": list(self.loss), "param_update": self.param_update, "routing": self.routing}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> DtypeDeviation:
        return DtypeDeviation(dtype=str(d["dtype"]), first_loss=float(d["first_loss"]), grad=float(d["grad"]),
                              update=float(d["update"]), loss=tuple(float(v) for v in d.get("loss") or ()),
                              param_update=float(d.get("param_update") or 0.0),
                              routing=float(d.get("routing") or 0.0))


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkReference:
    """The baseline's witnessed facts from several repeats: what a candidate must reproduce.

    ``reports`` are the trial's main process's (rank 0's); a multi-process job also has ``ranks``: per rank,
    that rank's report from each repeat, so each rank of a candidate is held to the same rank of the
    baseline (a DDP replica to its replica, an FSDP or ZeRO shard to its shard)."""

    reports: tuple[WitnessReport, ...]
    first_loss: tuple[float, ...]  # per repeat, the loss of step 1
    allowed_dtypes: tuple[str, ...]  # matmul dtypes the contract permits (the baseline's and its dtype knob's)
    deviations: tuple[DtypeDeviation, ...] = field(default=())
    ranks: tuple[tuple[int, tuple[WitnessReport, ...]], ...] = ()
    # Where ``first_loss`` was read: "witness" (the loss that reached backward() in step 1) or "printed" (the
    # job's first step line; references built before the witness kept its losses). A candidate is read alike.
    loss_source: str = "printed"

    def to_dict(self) -> dict[str, Any]:
        return {"reports": [r.to_dict() for r in self.reports], "first_loss": list(self.first_loss),
                "allowed_dtypes": list(self.allowed_dtypes), "deviations": [d.to_dict() for d in self.deviations],
                "ranks": [[rank, [r.to_dict() for r in reports]] for rank, reports in self.ranks],
                "loss_source": self.loss_source}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> WorkReference:
        return WorkReference(reports=tuple(WitnessReport.from_dict(r) for r in d["reports"]),
                             first_loss=tuple(float(v) for v in d["first_loss"]),
                             allowed_dtypes=tuple(d["allowed_dtypes"]),
                             deviations=tuple(DtypeDeviation.from_dict(x) for x in d.get("deviations") or ()
                                              if x.get("dtype") != SPLIT),
                             ranks=tuple((int(rank), tuple(WitnessReport.from_dict(r) for r in reports))
                                         for rank, reports in d.get("ranks") or ()),
                             loss_source=str(d.get("loss_source") or "printed"))

    @property
    def flops(self) -> int | None:
        counted = [r.flops for r in self.reports if r.flops is not None]
        return min(counted) if counted else None

    @property
    def tokens(self) -> int | None:
        """Tokens one optimizer step consumed, as the witness measured them, summed over ranks."""
        return step_tokens(self.reports[0], [reports[0] for _, reports in self.ranks]) if self.reports else None

    def of_rank(self, rank: int) -> WorkReference | None:
        """The reference for one rank (its reports as the main ones); None when the baseline had no such rank."""
        reports = dict(self.ranks).get(rank)
        if reports is None:
            return None
        return WorkReference(reports=reports, first_loss=self.first_loss, allowed_dtypes=self.allowed_dtypes,
                             deviations=self.deviations, loss_source=self.loss_source)


def step_tokens(main: WitnessReport, ranks: Sequence[WitnessReport] = ()) -> int | None:
    """What one optimizer step consumed over the whole job: each rank's measured tokens, summed (one process:
    its own)."""
    every = list(ranks) or [main]
    counts = [r.tokens for r in every]
    return sum(c for c in counts if c) if all(counts) else None


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
        loss=tuple(_rel(v, m) for v, m in zip(loss, means)),
        param_update=max(param_deviations(report, reference.reports), default=0.0),
        routing=routing_deviation(report, reference.reports))


def _param_means(reports: Sequence[WitnessReport]) -> list[list[float]]:
    n = len(reports[0].update_projs)
    return [[_mean([r.update_projs[i][j] for r in reports]) for j in range(len(reports[0].update_projs[i]))]
            for i in range(n)]


def param_deviations(report: WitnessReport, reports: Sequence[WitnessReport]) -> list[float]:
    """Per parameter, how far its update landed from the baseline's, relative to the update's size (its
    projections on the witness's random directions: their root mean square is the update's norm, up to a
    constant). Empty when either side did not keep them or the parameters differ."""
    if not reports or not report.update_projs or any(len(r.update_projs) != len(report.update_projs)
                                                     for r in reports):
        return []
    means = _param_means(reports)
    scales = [math.sqrt(_mean([m * m for m in row])) if row else 0.0 for row in means]
    atol = PARAM_ATOL * max(scales, default=0.0)
    out = []
    for mine, row, scale in zip(report.update_projs, means, scales):
        if len(mine) != len(row) or not row:
            return []
        diff = math.sqrt(_mean([(a - b) ** 2 for a, b in zip(mine, row)]))
        out.append(diff / max(scale, atol) if max(scale, atol) else diff)
    return out


def _param_spread(reports: Sequence[WitnessReport]) -> float:
    """SIGMAS times the baseline's own run-to-run spread of each parameter's update, relative, at the worst."""
    if len(reports) < 2 or not all(r.update_projs for r in reports):
        return 0.0
    return SIGMAS * max((d for r in reports for d in param_deviations(r, reports)), default=0.0)


def tolerance(reference: WorkReference, dtype: str, figure: str) -> float:
    """The relative tolerance for ``figure`` of a candidate computing in ``dtype``: the largest of
    assert_close's rtol for that dtype, the step floor, and (for a dtype the doctor ran) the margin times
    the deviation it measured. Nothing measured under another split of the global batch widens it: a
    candidate that re-splits is held to a reference taken at its own split (bot/stages/run/references.py)."""
    tol = max(ASSERT_CLOSE.get(dtype, ASSERT_CLOSE["float32"])[0], FLOOR[figure])
    base = lowest_precision(reference.reports[0].matmul_dtypes) if reference.reports else "float32"
    if PRECISION_RANK.get(dtype, 1) > PRECISION_RANK.get(base, 1):
        measured = [getattr(d, figure) for d in reference.deviations
                    if d.dtype != SPLIT and PRECISION_RANK.get(d.dtype, 1) >= PRECISION_RANK.get(dtype, 1)]
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


def update_spread(reference: WorkReference) -> tuple[float, float]:
    """SIGMAS times the baseline's own run-to-run spread of the weight update, relative: (the whole update vector,
    the worst parameter's own update). A job whose repeats differ (unseeded data order) moves this far on its own."""
    updates = [r.update_proj for r in reference.reports]
    whole = _vector_spread(updates) if updates and all(len(u) == len(updates[0]) for u in updates) else 0.0
    return whole, _param_spread(reference.reports)


def _fmt_flops(n: float) -> str:
    return f"{n / 1e9:.4g} GFLOP" if n >= 1e8 else f"{n / 1e6:.4g} MFLOP"


def work_invariants(report: WitnessReport, *, first_loss: float | None, steps_seen: int,
                    reference: WorkReference, trial: int | str = "?",
                    steps_at_report: int | None = None, steps_per_line: int = 1,
                    moved: Collection[str] = ()) -> list[InvariantCheck]:
    """Each invariant of one witnessed candidate trial against the baseline's reference. ``moved``: what the
    candidate's knobs decide off their defaults (infrarsi.decisions: ``optimizer_impl`` may change the
    optimizer's class, ``tf32_matmul`` float32 products to TF32).

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
    # Both reports written at their run's last measured step reached the step count of that run's lines, which
    # the bounds hold: a run longer than the doctor's (verification's look past the window) is not short of it.
    ok = lines * k - slack <= report.optimizer_steps <= max(lines, ceiling) * k + slack \
        and (report.at == "sigterm" or base.at == "sigterm" or report.at == base.at == "step"
             or report.optimizer_steps == base.optimizer_steps)
    checks.append(compared("optimizer_steps", ok, (
        f"{t}: {report.optimizer_steps} optimizer steps for {lines} reported steps"
        + (f" of {k} optimizer steps each" if k > 1 else "")
        + (f" (when the witness reported, at {report.at})" if early else "")
        + f" (baseline {base.optimizer_steps})")))

    ref_flops = moe_expected_flops(report, reference.reports) or reference.flops  # an MoE: per processed assignment
    if ref_flops:
        got = report.flops or 0
        short = (ref_flops - got) / ref_flops
        names = sorted({k for k, _ in report.flops_by_op} | {k for r in reference.reports for k, _ in r.flops_by_op})
        mine, theirs = dict(report.flops_by_op), dict(base.flops_by_op)
        diff = ", ".join(f"{n} {_fmt_flops(mine.get(n, 0))} vs {_fmt_flops(theirs.get(n, 0))}" for n in names
                         if mine.get(n, 0) != theirs.get(n, 0))
        checks.append(compared("work", short <= FLOP_TOLERANCE, (
            f"{t}: counted {_fmt_flops(got)} per optimizer step (step {report.count_step}), baseline "
            f"{_fmt_flops(ref_flops)}: {-short:+.1%}" + (f" ({diff})" if diff else "")
            + ("" if short <= FLOP_TOLERANCE else f"; less work than the baseline beyond {FLOP_TOLERANCE:.0%}"))))

    dtype = lowest_precision(report.matmul_dtypes)
    extra = sorted(set(report.matmul_dtypes) - set(reference.allowed_dtypes))
    fp32 = fp32_precision(report, base) if "float32" in report.matmul_dtypes else None
    if fp32 is not None and PRECISION_RANK.get(fp32, 1) > PRECISION_RANK.get(dtype, 1):
        dtype = fp32  # float32 tensors, products computed lower: judged at what they were computed in
    math = math_problems(report, base, allowed_dtypes=reference.allowed_dtypes,
                         tf32_knob_moved="tf32_matmul" in moved)
    seen = "" if report.math or not base.math else "; the witness read no float32 math settings"
    checks.append(compared("precision", not extra and not math and not seen, (
        f"{t}: matrix products ran in {', '.join(report.matmul_dtypes) or 'nothing counted'}"
        + (f" (float32 products computed in {fp32})" if fp32 else "")
        + (f"; the contract allows only {', '.join(reference.allowed_dtypes)}" if extra else "")
        + ("; " + "; ".join(math) + f": the contract allows only {', '.join(reference.allowed_dtypes)}"
           if math else "") + seen)))

    if base.steps_by == "hand" and not base.optimizer:
        checks.append(_hand_optimizer_row(report, t))
    elif not base.optimizer:
        checks.append(not_checked("optimizer", f"{t}: the baseline's witness recorded no torch.optim optimizer "
                                  "(none stepped, or a reference from before the optimizer was witnessed)"))
    else:
        wrong = optimizer_problems(report, base, impl_knob_moved="optimizer_impl" in moved)
        families = ", ".join(str(o.get("family")) for o in report.optimizer) or "no optimizer"
        checks.append(compared("optimizer", not wrong, f"{t}: " + ("; ".join(wrong[:3]) if wrong else (
            f"{families} configured as the baseline's at every optimizer step (class, every group's settings, "
            "its parameters, the state's dtypes; foreach/fused/capturable/differentiable not compared)"))))

    checks += [compared(c.name, c.ok, c.detail)
               for c in lever_checks(report, reference.reports, dtype=dtype, trial=t)]
    same = (report.params, report.param_elements, report.with_grad) == (base.params, base.param_elements,
                                                                         base.with_grad)
    holder = "the hand-written update's parameters are" if base.steps_by == "hand" else "the optimizer holds"
    checks.append(compared("trainable", same, (
        f"{t}: {holder} {report.params} tensors ({report.param_elements:,} elements), "
        f"{report.with_grad} received a gradient; baseline {base.params} ({base.param_elements:,}), "
        f"{base.with_grad}")))
    if not same:  # per-parameter figures are not comparable entry by entry
        why = f"{t}: not compared: the trainable set differs"
        return checks + [not_checked("first_step", why), not_checked("weights", why)]

    problems = []
    if first_loss is not None and reference.first_loss:
        tol = max(tolerance(reference, dtype, "first_loss"),
                  _spread_rel([[v] for v in reference.first_loss]))
        dev = _rel(first_loss, _mean(reference.first_loss))
        if not dev <= tol:
            problems.append(f"step-1 loss {first_loss:.6g} vs {_mean(reference.first_loss):.6g} "
                            f"({dev:.2e} > {tol:.1e} relative)")
    grads = [_filled(r.grad_norms) for r in reference.reports]
    tol = max(tolerance(reference, dtype, "grad"), _vector_spread(grads))
    dev = vector_deviation(_filled(report.grad_norms), grads)
    if not dev <= tol:
        problems.append(f"step-1 gradient norms off by {dev:.2e} relative (tolerance {tol:.1e})")
    checks.append(compared("first_step", not problems, (
        f"{t}: " + ("; ".join(problems) if problems else f"step-1 loss and {report.with_grad} gradient norms match "
                    f"the baseline ({dtype}; gradients off by {dev:.1e}, tolerance {tol:.1e})"))))

    if report.at == base.at == "step" and report.optimizer_steps != base.optimizer_steps:
        # A run stopped at another step than the reference's (verification's look past the window): its weights
        # are those of another step, held to the pair's baseline run of the same length (infrarsi/past_window.py).
        return checks
    updates = [r.update_proj for r in reference.reports]
    tol = max(tolerance(reference, dtype, "update"), _vector_spread(updates))
    dev = vector_deviation(report.update_proj, updates)
    norms = vector_deviation(report.weight_norms, [r.weight_norms for r in reference.reports])
    ok = dev <= tol and norms <= tol and len(report.update_proj) == len(base.update_proj)
    per_param = param_deviations(report, reference.reports)
    param_text = ""
    if per_param:
        param_tol = max(tolerance(reference, dtype, "param_update"), _param_spread(reference.reports))
        worst = max(range(len(per_param)), key=lambda i: per_param[i])
        ok = ok and per_param[worst] <= param_tol
        shape = report_shape(report, worst)
        param_text = (f"; each parameter's own update within {per_param[worst]:.2e} of the baseline's "
                      f"(tolerance {param_tol:.1e})" if per_param[worst] <= param_tol else
                      f"; parameter {worst}{shape}'s own update is {per_param[worst]:.0%} off the baseline's "
                      f"(tolerance {param_tol:.0%})")
    checks.append(compared("weights", ok, (
        f"{t}: after {report.optimizer_steps} steps the weight update differs by {dev:.2e} and the weight norms "
        f"by {norms:.2e} relative (tolerance {tol:.1e})" + param_text)))
    return checks


def _hand_optimizer_row(report: WitnessReport, t: str) -> InvariantCheck:
    """The ``optimizer`` row of a job that updates its parameters by hand (no torch.optim optimizer): such an
    update has no settings the witness can read; what it does to each parameter is held by ``weights``."""
    if report.optimizer:
        families = ", ".join(str(o.get("family")) for o in report.optimizer)
        return not_checked("optimizer", f"{t}: the candidate steps a torch.optim optimizer ({families}) where the "
                           "baseline updates its parameters by hand: no settings of the baseline's to compare with "
                           "(the weights rows hold the update)")
    return compared("optimizer", True, f"{t}: no torch.optim optimizer in either run: both update their parameters "
                    f"by hand after backward() ({report.optimizer_steps} steps); a hand-written update has no "
                    "settings to read, the weights rows hold what it does to each parameter")


def report_shape(report: WitnessReport, i: int) -> str:
    """`` (shape [32])`` for the ``i``-th parameter in the optimizer's order, when the report names shapes."""
    members = [shape for group in (report.optimizer[0].get("members") or []) for shape in group] \
        if report.optimizer else []
    return f" (shape {members[i]})" if i < len(members) else ""



def first_loss(record: TrialRecord, source: str = "printed") -> float | None:
    """The loss of the first step: the one that reached backward() in optimizer step 1 (``source="witness"``),
    or the one the job printed on its first step line (a warm-up step when there is one)."""
    if source == "witness":
        report = witnessed_report(record)
        losses = report.backward_loss if report is not None else ()
        return losses[0] if losses else None
    m = record.metrics
    values = m.warmup_loss or m.loss
    return values[0] if values else None


def window_loss(record: TrialRecord, first_step: int, steps: int) -> tuple[float, ...] | None:
    """The losses that reached backward() in optimizer steps ``first_step`` .. ``first_step + steps - 1``, as the
    witness saw them (None: not witnessed, or a step in the window with no scalar loss)."""
    report = witnessed_report(record)
    if report is None or first_step < 1:
        return None
    values = report.backward_loss[first_step - 1:first_step - 1 + steps]
    if not values or any(v is None for v in values):
        return None
    return tuple(float(v) for v in values)  # type: ignore[arg-type]


def loss_window(warmup: int, measured: int, steps_per_line: int, records: Sequence[TrialRecord]) -> tuple[int, int]:
    """(first optimizer step, steps) of the measured window that every witnessed record covers."""
    k = max(1, steps_per_line)
    first = warmup * k + 1
    reports = [r for r in (witnessed_report(x) for x in records) if r is not None]
    have = min((len(r.backward_loss) for r in reports), default=0)
    return first, max(0, min(measured * k, have - first + 1))


def witnessed_report(record: TrialRecord) -> WitnessReport | None:
    return WitnessReport.from_dict(record.metrics.witness) if record.metrics.witness else None


def rank_reports(record: TrialRecord) -> dict[int, WitnessReport]:
    """Every rank's report of a multi-process trial, by rank (empty for one process)."""
    return {r.rank if r.rank is not None else i: r
            for i, r in enumerate(WitnessReport.from_dict(d) for d in record.metrics.witness_ranks)}


def build_reference(records: Sequence[TrialRecord], *, allowed_dtypes: Sequence[str],
                    lower: Sequence[tuple[str, TrialRecord]] = (),
                    window: tuple[int, int] | None = None) -> WorkReference | None:
    """The reference from the baseline's witnessed repeats, with the deviation of each ``(dtype, run)``.
    Losses are the witness's (what reached backward()) when every repeat has them, and ``window`` (first
    optimizer step, steps) says which of them the lower-dtype runs' per-step deviations are measured over."""
    good = [r for r in records if r.outcome is Outcome.OK and r.metrics.witness]
    if not good:
        return None
    reports = tuple(WitnessReport.from_dict(r.metrics.witness) for r in good)  # type: ignore[arg-type]
    source = "witness" if all(first_loss(r, "witness") is not None for r in good) else "printed"
    losses = tuple(v for v in (first_loss(r, source) for r in good) if v is not None)
    allowed = tuple(sorted(set(allowed_dtypes) | {d for r in reports for d in r.matmul_dtypes}))
    per_run = [rank_reports(r) for r in good]
    common = sorted(set.intersection(*(set(p) for p in per_run))) if all(per_run) else []
    ranks = tuple((rank, tuple(p[rank] for p in per_run)) for rank in common)
    reference = WorkReference(reports=reports, first_loss=losses, allowed_dtypes=allowed, ranks=ranks,
                              loss_source=source)

    def curve(run: TrialRecord) -> tuple[float, ...]:
        if source == "witness" and window is not None:
            return window_loss(run, *window) or ()
        return run.metrics.loss

    deviations = []
    for dtype, run in lower:
        report = witnessed_report(run)
        loss = first_loss(run, source)
        if run.outcome is Outcome.OK and report is not None and loss is not None:
            deviations.append(dtype_deviation(report, loss, curve(run), reference, [curve(r) for r in good], dtype))
    return WorkReference(reports=reports, first_loss=losses, allowed_dtypes=allowed, deviations=tuple(deviations),
                         ranks=ranks, loss_source=source)


def record_invariants(record: TrialRecord, reference: WorkReference,
                      moved: Collection[str] = ()) -> list[InvariantCheck]:
    """The witnessed rows of one finished trial against the baseline's reference (its outcome already says
    whether the witness is trusted). A multi-process trial holds each rank to the same rank of the baseline
    (the printed loss is rank 0's), plus the work of all ranks together (``work_total``); each row then says
    how every rank fared."""
    report = witnessed_report(record)
    m = record.metrics
    if report is None:
        why = (f"trial {record.trial_no}: not witnessed here: {m.witness_skipped}" if m.witness_skipped else
               f"trial {record.trial_no}: the trial was not witnessed")
        return [not_checked(name, why) for name in WITNESS_ROWS]
    ranks = rank_reports(record)
    if not ranks or not reference.ranks:
        return work_invariants(report, first_loss=first_loss(record, reference.loss_source), steps_seen=m.steps_seen,
                               steps_at_report=m.steps_at_witness, steps_per_line=m.steps_per_line,
                               reference=reference, trial=record.trial_no, moved=moved)
    per_rank: dict[int, list[InvariantCheck]] = {}
    for rank, _ in reference.ranks:
        mine = ranks.get(rank)
        ref = reference.of_rank(rank)
        if mine is None or ref is None:
            per_rank[rank] = [compared(name, False, f"trial {record.trial_no}: rank {rank} wrote no witness report "
                                       f"(the baseline's did)") for name in WITNESS_ROWS]
            continue
        per_rank[rank] = work_invariants(mine, first_loss=first_loss(record, reference.loss_source)
                                         if rank == 0 else None,
                                         steps_seen=m.steps_seen, steps_at_report=m.steps_at_witness,
                                         steps_per_line=m.steps_per_line, reference=ref,
                                         trial=f"{record.trial_no} rank {rank}", moved=moved)
    rows = _rows_over_ranks(per_rank)
    base_total = sum(min((r.flops or 0) for r in reports) for _, reports in reference.ranks)
    got_total = sum((r.flops or 0) for r in ranks.values())
    if base_total:
        short = (base_total - got_total) / base_total
        rows.append(compared("work_total", short <= FLOP_TOLERANCE, (
            f"trial {record.trial_no}: all {len(ranks)} ranks counted {_fmt_flops(got_total)} per optimizer step, "
            f"the baseline's {len(reference.ranks)} ranks {_fmt_flops(base_total)}: {-short:+.1%}"
            + ("" if short <= FLOP_TOLERANCE else f"; less work than the baseline beyond {FLOP_TOLERANCE:.0%}"))))
    return rows


def _rows_over_ranks(per_rank: dict[int, list[InvariantCheck]]) -> list[InvariantCheck]:
    """One row per invariant: broken if any rank broke it (that rank's detail), not checked if any rank could not
    check it, else ok with rank 0's detail and the number of ranks."""
    names = [c.name for c in per_rank[min(per_rank)]]
    for checks in per_rank.values():
        names += [c.name for c in checks if c.name not in names]
    rows = []
    for name in names:
        cells = [(rank, c) for rank, checks in sorted(per_rank.items()) for c in checks if c.name == name]
        worst = next((c for _, c in cells if c.broken), None) or next((c for _, c in cells if not c.checked), None)
        if worst is not None:
            rows.append(worst)
            continue
        first = cells[0][1]
        rows.append(compared(name, True, first.detail + (f" (and the same on the other {len(cells) - 1} rank(s))"
                                                         if len(cells) > 1 else "")))
    return rows
