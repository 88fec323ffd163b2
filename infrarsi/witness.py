"""The witness's report as the bot reads it: authenticated, parsed, or the reason it cannot be trusted.

The witness (``bot/executors/witness``) runs inside the candidate's interpreter
and writes one JSON line, HMAC-SHA256 under a per-trial key that only the bot
and the witness hold. Pure: the executor hands over the raw lines, the key and
the sha256 the witness's source must have; this module says what came back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any, Sequence

WITNESS_ENV = "INFRARSI_WITNESS"
REPORT_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class WitnessReport:
    """What the witness saw in one process of one trial."""

    optimizer_steps: int
    count_step: int
    flops: int | None  # counted by FlopCounterMode over optimizer step ``count_step``
    flops_by_op: tuple[tuple[str, int], ...]
    matmul_dtypes: tuple[str, ...]
    counted_s: float | None  # wall time of the counted step, counter included
    params: int  # tensors the optimizer holds
    param_elements: int
    grad_norms: tuple[float | None, ...]  # before optimizer step 1, per parameter in optimizer order
    weight_norms: tuple[float, ...]  # at exit, same order
    update_proj: tuple[float, ...]  # per parameter, <w_exit - w_before_step_1, r> for a fixed random r
    tampered: tuple[str, ...]
    source_sha256: str
    # When it was written: at exit, at the end of the last measured optimizer step ("step"; the bot stops the
    # job after it), or on the bot's SIGTERM; ``t`` on the bot's clock (perf_counter is CLOCK_MONOTONIC).
    at: str = "exit"
    t: float | None = None
    rank: int | None = None  # the process's RANK (None: a single process)
    # What the counted step consumed: token ids that reached an embedding (the most any one embedding table
    # was indexed with) and targets that reached a classification loss (nll_loss, which cross_entropy runs).
    tokens_in: int | None = None
    targets_in: int | None = None
    # Counted FLOPs taken off as not real work, by why: "meta" (meta or fake tensors), "unreached" (a forward
    # product whose result never reached the loss), "no_grad" (outside the differentiated graph).
    flops_excluded: tuple[tuple[str, int], ...] = ()
    # Per optimizer step up to the report (1-based step i at index i-1): when it ended, on the clock the bot
    # stamps with (CLOCK_MONOTONIC), and the sum of the scalar losses passed to backward() during it (None:
    # none). Empty in a report written before the witness kept them.
    step_t: tuple[float, ...] = ()
    backward_loss: tuple[float | None, ...] = ()
    # Per optimizer, in the order each first stepped: {"family", "timeline": [[from step, [group settings]]],
    # "members": per group the parameter shapes at its first step, "members_at_end", "state_dtypes"}.
    optimizer: tuple[dict[str, Any], ...] = ()
    # The settings deciding how float32 products are computed: [[from step, {setting: value}], ...].
    math: tuple[tuple[int, dict[str, Any]], ...] = ()
    # Per parameter, the update's projections on several fixed random directions (the first is update_proj).
    update_projs: tuple[tuple[float, ...], ...] = ()
    # What made the optimizer steps: "optimizer" (torch.optim's step hooks) or "hand" (a job with no torch.optim
    # optimizer that updates its parameters by hand after backward(): each step is the backward() calls before
    # the gradients were cleared; the parameters are the nn.Module parameters it registered).
    steps_by: str = "optimizer"
    # Dropout in the counted step (None: a report from before the witness read it): per (probability, the shape
    # it applies to less its batch dimension, how its mask was drawn: "keyed" or inside a fused "kernel"), the
    # elements it covered. And per Mixture-of-Experts layer, what it routed (infrarsi/lever_rows.py reads both).
    dropout: tuple[tuple[float, tuple[int, ...], int, str], ...] | None = None
    moe: tuple[dict[str, Any], ...] | None = None

    @property
    def tokens(self) -> int | None:
        """Tokens (or samples) one optimizer step consumed, as the witness measured them; None: neither seen."""
        seen = [n for n in (self.tokens_in, self.targets_in) if n]
        return max(seen) if seen else None

    @property
    def with_grad(self) -> int:
        return sum(1 for g in self.grad_norms if g is not None)

    def to_dict(self) -> dict[str, Any]:
        return {"v": REPORT_VERSION, "optimizer_steps": self.optimizer_steps, "count_step": self.count_step,
                "flops": self.flops, "flops_by_op": dict(self.flops_by_op), "matmul_dtypes": list(self.matmul_dtypes),
                "counted_s": self.counted_s, "params": self.params, "param_elements": self.param_elements,
                "grad_norms": list(self.grad_norms), "weight_norms": list(self.weight_norms),
                "update_proj": list(self.update_proj),
                "tampered": list(self.tampered), "source_sha256": self.source_sha256, "at": self.at, "t": self.t,
                "rank": self.rank, "tokens_in": self.tokens_in, "targets_in": self.targets_in,
                "flops_excluded": dict(self.flops_excluded), "step_t": list(self.step_t),
                "backward_loss": list(self.backward_loss), "optimizer": list(self.optimizer),
                "math": [[step, settings] for step, settings in self.math],
                "update_projs": [list(p) for p in self.update_projs], "steps_by": self.steps_by,
                **({} if self.dropout is None else {"dropout": [[p, list(shape), n, kind]
                                                                for p, shape, n, kind in self.dropout]}),
                **({} if self.moe is None else {"moe": [dict(m) for m in self.moe]})}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> WitnessReport:
        return WitnessReport(
            optimizer_steps=int(d["optimizer_steps"]), count_step=int(d["count_step"]),
            flops=None if d.get("flops") is None else int(d["flops"]),
            flops_by_op=tuple(sorted((str(k), int(v)) for k, v in dict(d.get("flops_by_op") or {}).items())),
            matmul_dtypes=tuple(str(x) for x in d.get("matmul_dtypes") or ()),
            counted_s=None if d.get("counted_s") is None else float(d["counted_s"]),
            params=int(d["params"]), param_elements=int(d["param_elements"]),
            grad_norms=tuple(None if g is None else float(g) for g in d.get("grad_norms") or ()),
            weight_norms=tuple(float(w) for w in d.get("weight_norms") or ()),
            update_proj=tuple(float(w) for w in d.get("update_proj") or ()),
            tampered=tuple(str(t) for t in d.get("tampered") or ()), source_sha256=str(d["source_sha256"]),
            at=str(d.get("at") or "exit"), t=None if d.get("t") is None else float(d["t"]),
            rank=_rank(d.get("rank")), tokens_in=_count(d.get("tokens_in")), targets_in=_count(d.get("targets_in")),
            flops_excluded=tuple(sorted((str(k), int(v)) for k, v in dict(d.get("flops_excluded") or {}).items())),
            step_t=tuple(float(t) for t in d.get("step_t") or ()),
            backward_loss=tuple(None if v is None else float(v) for v in d.get("backward_loss") or ()),
            optimizer=tuple(dict(o) for o in d.get("optimizer") or ()),
            math=tuple((int(step), dict(settings)) for step, settings in d.get("math") or ()),
            update_projs=tuple(tuple(float(x) for x in p) for p in d.get("update_projs") or ()),
            steps_by=str(d.get("steps_by") or "optimizer"),
            dropout=None if d.get("dropout") is None else tuple(
                (float(p), tuple(int(x) for x in shape), int(n), str(kind)) for p, shape, n, kind in d["dropout"]),
            moe=None if d.get("moe") is None else tuple(dict(m) for m in d["moe"]))


def _rank(value: Any) -> int | None:
    """The report's rank: the witness writes ``RANK`` as it found it (a string, or null)."""
    try:
        return None if value is None or value == "" else int(value)
    except (TypeError, ValueError):
        return None


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class WitnessResult:
    """The authenticated report of the trial's main process, or why there is none to trust."""

    report: WitnessReport | None
    error: str | None


def new_key() -> bytes:
    import secrets

    return secrets.token_bytes(32)


def source_sha256(source: bytes) -> str:
    return hashlib.sha256(source).hexdigest()


def authenticate(lines: Sequence[str], *, key: bytes, expected_sha256: str) -> WitnessResult:
    """The one report the witness wrote, checked: MAC under ``key``, the witness's own source, no tampering.

    Every line must authenticate (a line that does not was written by someone
    else on the witness's channel); processes other than rank 0 may add their
    own reports, the first of rank 0 (or without a rank) is the trial's.
    """
    reports: list[dict[str, Any]] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            outer = json.loads(line)
            text, mac = str(outer["witness"]), str(outer["mac"])
        except (ValueError, KeyError, TypeError):
            return WitnessResult(report=None, error="a line on the witness channel is not a witness report")
        good = hmac.new(key, text.encode(), "sha256").hexdigest()
        if not hmac.compare_digest(good, mac):
            return WitnessResult(report=None, error="a witness report failed authentication (spoofed)")
        reports.append(json.loads(text))
    if not reports:
        return WitnessResult(report=None, error="the witness was requested but wrote no report (disabled, "
                                                "bypassed with -I/-S/-E, or the process died before exit)")
    main = next((r for r in reports if r.get("rank") in (None, "0")), reports[0])
    if main.get("source_sha256") != expected_sha256:
        return WitnessResult(report=None, error="the witness that ran is not the bot's (source hash differs)")
    report = WitnessReport.from_dict(main)
    if report.tampered:
        return WitnessResult(report=report, error="the witness was tampered with: " + "; ".join(report.tampered))
    return WitnessResult(report=report, error=None)
