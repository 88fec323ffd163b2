"""The dropout and Mixture-of-Experts rows: what a lever that real repos need may not change, as the witness saw it.

**Dropout** (the ``dropout`` row). The witness records, over the counted step,
every dropout site: its probability, the shape it applies to less the batch
dimension (attention weights ``(heads, T, T)``, activations ``(T, C)``) and the
elements it covered — a re-split moves elements between micro-batches, never
their total. A candidate must drop the same: a patch that sets a probability to
0, or moves dropout elsewhere, is ``invalid`` with the site named. The masks
themselves are keyed by the witness (one draw of the job's own stream per site,
``bot/executors/witness/site/sitecustomize.py``), so a rewrite that moves a
dropout into SDPA's math path, a compiled graph or a written-out dropout-add
draws the same masks and the numeric rows stay strict. A site whose mask a
fused attention kernel draws itself (flash or memory-efficient attention with
``dropout_p`` on a GPU) cannot be keyed: where the candidate and the baseline
draw a site's masks differently (:func:`mask_mismatch`), the rows that compare
numbers step for step are ``not checked`` with that reason, never ``ok``.

**Mixture of Experts** (the ``moe`` row). Per MoE layer (found by structure,
below) the witness records the token rows its router saw, the assignments its
top-k chose, the rows each expert's first matrix product received (zero padding
does not count) — hence the assignments dropped over capacity — and each
auxiliary loss the layer's forward left unconsumed (a load-balancing loss, a
router z-loss, wherever a manager collects it) with the weight at which it
reached the loss that backward() differentiated, its gradient. The counted step
is drawn per trial, so routing is compared where it does not depend on which
step was counted: the layers and their experts, the tokens and assignments
(exact); the capacity — in a forward that dropped assignments, the fullest
expert's rows, a capacity factor times the forward's tokens whatever the weights
— must be one the baseline's counted steps showed, and a layer may drop nothing
where the baseline never dropped; the number of auxiliary losses and their
weights (exact, to rounding). Which assignments overflow depends on the step's
weights: step 1, where they are still the baseline's, is the ``first_step``
row's (the router's and the experts' gradients), the later steps the weights'
and the loss band's. The counted FLOPs of such an MoE move with the assignments
processed: the ``work`` row holds it to the baseline's FLOPs per processed
assignment (:func:`moe_expected_flops`). The witness reads no routing in step 1
itself: a dispatch mode active at a compiled model's first call keeps dynamo
from ever compiling it.

What it cannot see: an MoE layer whose experts are neither a list of one class
nor stacked weights beside a linear router with one output per expert (a router
that is a bare parameter, experts in another process); an auxiliary loss
computed outside the layer's forward (from router logits stored on the module);
routing decided without ``topk`` (its assignments then read "unknown"); dropout
written by hand from ``torch.rand`` (neither keyed nor counted: its stream is
compared as it is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infrarsi.dtypes import PRECISION_RANK
from infrarsi.witness import WitnessReport

#: Relative difference allowed between an auxiliary loss's weight and the baseline's: rounding only (fp32),
#: or a lower precision's (bf16's epsilon is 7.8e-3).
AUX_RTOL = {1: 1e-6, 2: 2e-2}
#: The rows that compare numbers step for step: not checked where dropout's masks were drawn differently.
NUMERIC_ROWS = ("first_step", "weights", "loss_band", "final_loss", "past_window")


@dataclass(frozen=True, kw_only=True, slots=True)
class LeverCheck:
    name: str
    ok: bool
    detail: str


def dropout_sites(report: WitnessReport) -> dict[tuple[float, tuple[int, ...]], int]:
    """(probability, shape it applies to less the batch dimension) → elements covered in the counted step."""
    out: dict[tuple[float, tuple[int, ...]], int] = {}
    for p, shape, n, _ in report.dropout or ():
        out[(p, shape)] = out.get((p, shape), 0) + n
    return out


def _site(p: float, shape: tuple[int, ...]) -> str:
    return f"p={p:g} on ({', '.join(map(str, shape))})"


def dropout_check(report: WitnessReport, base: WitnessReport, trial: str) -> LeverCheck | None:
    """The dropout the candidate applied against the baseline's (None: neither has dropout, or the baseline's
    report predates the witness's reading of it)."""
    if base.dropout is None or (not base.dropout and not report.dropout):
        return None
    mine, theirs = dropout_sites(report), dropout_sites(base)
    if report.dropout is None:
        return LeverCheck(name="dropout", ok=False, detail=f"{trial}: the witness read no dropout (the baseline "
                          f"drops {', '.join(_site(*k) for k in sorted(theirs))})")
    wrong = [f"dropout {_site(*k)}: {mine.get(k, 0):,} elements here, {theirs.get(k, 0):,} in the baseline's counted "
             "step" for k in sorted(set(mine) | set(theirs)) if mine.get(k, 0) != theirs.get(k, 0)]
    if wrong:
        return LeverCheck(name="dropout", ok=False, detail=f"{trial}: " + "; ".join(wrong[:3])
                          + " (another probability or another place is another model)")
    why = mask_mismatch(report, base)
    sites = ", ".join(f"{_site(*k)} ({n:,} elements)" for k, n in sorted(theirs.items()))
    return LeverCheck(name="dropout", ok=True, detail=f"{trial}: dropout as the baseline's, {sites}; masks "
                      + ("keyed by the witness, compared step for step" if why is None else f"not comparable: {why}"))


def mask_mismatch(report: WitnessReport, base: WitnessReport) -> str | None:
    """Why the candidate's dropout masks cannot equal the baseline's (a site drawn by a fused attention kernel on
    one side and keyed on the other), or None."""
    def kinds(r: WitnessReport) -> dict[tuple[float, tuple[int, ...]], set[str]]:
        out: dict[tuple[float, tuple[int, ...]], set[str]] = {}
        for p, shape, _, kind in r.dropout or ():
            out.setdefault((p, shape), set()).add(kind)
        return out

    mine, theirs = kinds(report), kinds(base)
    for key in sorted(set(mine) & set(theirs)):
        if mine[key] != theirs[key]:
            return (f"dropout {_site(*key)} draws its masks {' and '.join(sorted(mine[key]))} here, "
                    f"{' and '.join(sorted(theirs[key]))} in the baseline (a fused attention kernel draws its own "
                    "masks, which the witness cannot key): the numbers of a step with other masks are not the "
                    "baseline's")
    return None


def _share(layer: dict[str, Any]) -> float | None:
    assigned, dropped = layer.get("assigned"), layer.get("dropped")
    return dropped / assigned if assigned and dropped is not None else None


def routing_deviation(report: WitnessReport, reports: Sequence[WitnessReport]) -> float:
    """How far a run's dropped share strays from the baseline repeats' mean, at the worst layer (what a dtype
    change moved, measured by the doctor and shown in doctor.md; the dropped share also moves with the step)."""
    worst = 0.0
    for i, layer in enumerate(report.moe or ()):
        shares = [s for r in reports if r.moe and i < len(r.moe) and (s := _share(r.moe[i])) is not None]
        mine = _share(layer)
        if shares and mine is not None:
            worst = max(worst, abs(mine - sum(shares) / len(shares)))
    return worst


def _name(i: int, layer: dict[str, Any]) -> str:
    return f"MoE layer {i} ({layer.get('layer', '?')})"


def _capacities(reports: Sequence[WitnessReport], i: int) -> set[int]:
    return {int(c) for r in reports if r.moe and i < len(r.moe) for c in r.moe[i].get("capacity") or ()}


def _ever_dropped(reports: Sequence[WitnessReport], i: int) -> bool:
    return any((r.moe[i].get("dropped") or 0) > 0 for r in reports if r.moe and i < len(r.moe))


def moe_check(report: WitnessReport, reports: Sequence[WitnessReport], *, dtype: str, trial: str) -> LeverCheck | None:
    """The candidate's MoE layers against the baseline repeats' (None: no MoE layer on either side, or a baseline
    report from before the witness read them). Only what no step moves is compared: which tokens an expert
    overflows with depends on the weights of the step counted, its capacity does not."""
    base = reports[0]
    if base.moe is None or (not base.moe and not report.moe):
        return None
    mine = list(report.moe or ())
    if len(mine) != len(base.moe):
        return LeverCheck(name="moe", ok=False, detail=f"{trial}: {len(mine)} MoE layer(s) ran in the counted step, "
                          f"the baseline's {len(base.moe)}")
    low = PRECISION_RANK.get(dtype, 1) > 1
    problems: list[str] = []
    notes: list[str] = []
    for i, (layer, theirs) in enumerate(zip(mine, base.moe)):
        name = _name(i, theirs)
        for key, what in (("experts", "experts"), ("tokens", "token rows reached the router"),
                          ("assigned", "token assignments were chosen")):
            if layer.get(key) != theirs.get(key) and theirs.get(key) is not None:
                problems.append(f"{name}: {layer.get(key)} {what}, the baseline's {theirs.get(key)}")
        dropped, assigned = layer.get("dropped"), layer.get("assigned")
        seen = f"{dropped} of its {assigned:,} token assignments" if assigned else f"{dropped} token assignments"
        capacity, base_capacity = set(layer.get("capacity") or ()), _capacities(reports, i)
        if dropped and not _ever_dropped(reports, i):
            problems.append(f"{name} dropped {seen} in optimizer step {report.count_step}; the baseline dropped "
                            "none in its counted steps (its experts have no capacity there)")
        elif capacity and base_capacity and not capacity <= base_capacity:
            problems.append(f"{name} capped its experts at {_counts(capacity)} assignments a forward, the baseline "
                            f"at {_counts(base_capacity)} (dropping {seen} in optimizer step {report.count_step})")
        elif assigned:
            notes.append(f"{name}: capacity {_counts(capacity or base_capacity) or 'never reached'}, {seen} dropped")
        aux, their_aux = layer.get("aux") or [], theirs.get("aux") or []
        if len(aux) != len(their_aux):
            problems.append(f"{name}: {len(aux)} auxiliary loss(es) left its forward, the baseline's "
                            f"{len(their_aux)}")
            continue
        rtol = AUX_RTOL[2 if low else 1]
        for j, (a, b) in enumerate(zip(aux, their_aux)):
            w, wb = float(a[0]), float(b[0])
            if abs(w - wb) > rtol * abs(wb) + 1e-12:
                how = "never reached the loss" if w == 0 else f"reached the loss at weight {w:.6g}"
                problems.append(f"{name}: auxiliary loss {j + 1} {how}; the baseline's at weight {wb:.6g}")
        if their_aux:
            notes.append(f"{name}: {len(their_aux)} auxiliary loss(es) at the baseline's weights "
                         + ", ".join(f"{float(b[0]):.6g}" for b in their_aux))
    if problems:
        return LeverCheck(name="moe", ok=False, detail=f"{trial}: " + "; ".join(problems[:3]))
    return LeverCheck(name="moe", ok=True, detail=f"{trial}: routing as the baseline's: " + "; ".join(notes[:4]))


def _counts(values: set[int]) -> str:
    return "/".join(str(v) for v in sorted(values))


def _processed(report: WitnessReport) -> int | None:
    return sum(sum(layer.get("processed") or ()) for layer in report.moe) if report.moe else None


def moe_expected_flops(report: WitnessReport, reports: Sequence[WitnessReport]) -> float | None:
    """The FLOPs the baseline would have counted had its experts processed the candidate's assignments, or None
    (not an MoE whose processed assignments moved between the baseline's counted steps).

    With a capacity, how many assignments the experts process depends on the step counted, and their FLOPs with
    it: the baseline's repeats, each counted at another step, give FLOPs per processed assignment (a line through
    them), and the candidate is held to the lowest of those lines at its own count."""
    mine = _processed(report)
    points = [(x, float(r.flops)) for r in reports if r.flops is not None and (x := _processed(r)) is not None]
    xs = {x for x, _ in points}
    if mine is None or len(xs) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    if slope <= 0:
        return None
    return min(y + slope * (mine - x) for x, y in points)


def lever_checks(report: WitnessReport, reports: Sequence[WitnessReport], *, dtype: str,
                 trial: str) -> list[LeverCheck]:
    """The dropout and MoE rows of one witnessed report against the baseline's repeats (each only where the
    baseline or the candidate has what it compares)."""
    found = [dropout_check(report, reports[0], trial), moe_check(report, reports, dtype=dtype, trial=trial)]
    return [c for c in found if c is not None]
