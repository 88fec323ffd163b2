"""The settings the witness read inside the job, held to the baseline's: the optimizer's, and float32 math's.

A fused-AdamW rewrite that drops ``weight_decay`` moves a short run's weights
less than the numeric rows' tolerances; torch's default betas or eps, a
no-decay parameter group, a schedule rewritten after warm-up, optimizer state
kept in bf16 all compute something else. So the optimizer is compared as
configured, exactly: its class, every group's settings at every optimizer step
(lr, betas, momentum, eps, weight_decay, dampening, nesterov, amsgrad,
maximize — whatever the group holds), which parameters each group holds, and
the dtype of its state. How a group is run (``foreach``, ``fused``,
``capturable``, ``differentiable``) is not part of the task and is never
compared; a knob the contract declares as choosing the optimizer's
implementation (``decides = ["optimizer_impl"]``) may also change its class.

Float32 products can be computed at lower precision without a tensor changing
dtype (``set_float32_matmul_precision("medium")``, TF32 flags, oneDNN's fp32
math mode): a change is allowed only where the contract allows that precision
(a dtype it permits, or a knob that decides ``tf32_matmul`` moved off its
default), and the candidate is then judged at it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from infrarsi.dtypes import PRECISION_RANK
from infrarsi.witness import WitnessReport

#: What a float32 math setting's value computes products in (a torch dtype name, or "tf32").
_FP32_VALUE = {"highest": "float32", "ieee": "float32", "high": "tf32", "tf32": "tf32", "medium": "bfloat16",
               "bf16": "bfloat16"}
#: The boolean flags that let float32 products run in TF32 when true.
_TF32_FLAGS = ("cuda.matmul.allow_tf32", "cudnn.allow_tf32")
#: Flags that let a bf16 or fp16 product reduce at lower precision: only where that dtype is allowed.
_REDUCTION_FLAGS = {"cuda.matmul.allow_bf16_reduced_precision_reduction": "bfloat16",
                    "cuda.matmul.allow_fp16_reduced_precision_reduction": "float16"}


def _rank(dtype: str) -> float:
    return PRECISION_RANK.get(dtype, 1)


def implied_precision(setting: str, value: Any) -> str | None:
    """The precision a setting's value computes products at (None: it says nothing about it, e.g. "none",
    which defers to the legacy setting)."""
    if setting in _TF32_FLAGS:
        return "tf32" if value is True else "float32"
    if setting in _REDUCTION_FLAGS:
        return _REDUCTION_FLAGS[setting] if value is True else None
    if setting == "default_dtype":
        return str(value)
    return _FP32_VALUE.get(str(value))


def _kind(setting: str) -> str:
    """Which products a setting governs: convolutions (cuDNN's own TF32 flag is on by default), recurrent
    layers, or matrix multiplications."""
    if "conv" in setting or setting in ("cudnn.allow_tf32", "cudnn.fp32_precision"):
        return "conv"
    return "rnn" if "rnn" in setting else "matmul"


def _values(report: WitnessReport) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for _, settings in report.math:
        for key, value in settings.items():
            if value not in out.setdefault(key, []):
                out[key].append(value)
    return out


def math_changes(report: WitnessReport, base: WitnessReport) -> list[tuple[str, Any, list[Any]]]:
    """(setting, the candidate's value the baseline never had, the baseline's values)."""
    mine, theirs = _values(report), _values(base)
    return [(key, value, theirs.get(key, [])) for key, values in sorted(mine.items()) for value in values
            if value not in theirs.get(key, [])]


def fp32_precision(report: WitnessReport, base: WitnessReport) -> str | None:
    """The lowest precision a setting the candidate changed computes float32 products at (None: no change
    lowers it below the baseline's)."""
    lowest: str | None = None
    for key, value, _ in math_changes(report, base):
        implied = implied_precision(key, value)
        if implied is not None and (lowest is None or _rank(implied) > _rank(lowest)):
            lowest = implied
    return lowest


def math_problems(report: WitnessReport, base: WitnessReport, *, allowed_dtypes: Collection[str],
                  tf32_knob_moved: bool) -> list[str]:
    """Each float32 math setting the candidate changed to a precision the contract does not allow."""
    if not base.math:
        return []
    # per kind of product, the lowest precision the baseline itself allowed (its own TF32 convolutions, say)
    base_rank: dict[str, float] = {}
    for key, values in _values(base).items():
        for value in values:
            implied = implied_precision(key, value)
            if key != "default_dtype" and key not in _REDUCTION_FLAGS and implied is not None:
                base_rank[_kind(key)] = max(base_rank.get(_kind(key), 1.0), _rank(implied))
    problems = []
    for key, value, theirs in math_changes(report, base):
        implied = implied_precision(key, value)
        if implied is None:
            continue
        if key in _REDUCTION_FLAGS:  # how bf16/fp16 products reduce: only where that dtype is allowed at all
            allowed = implied in allowed_dtypes
        elif _rank(implied) <= base_rank.get(_kind(key), 1.0):
            continue  # no less precise than the baseline computed these products
        else:
            allowed = any(_rank(d) >= _rank(implied) for d in allowed_dtypes if d in PRECISION_RANK) \
                or (implied == "tf32" and tf32_knob_moved)
        if not allowed:
            problems.append(f"{key} = {value!r} (baseline {', '.join(map(repr, theirs)) or 'unset'}) computes "
                            f"float32 products in {implied}")
    return problems


def _settings_at(timeline: Sequence[Sequence[Any]], step: int) -> Any:
    current = None
    for start, settings in timeline:
        if int(start) <= step:
            current = settings
    return current


def _group_diff(mine: list[dict[str, Any]], theirs: list[dict[str, Any]], *, common_keys: bool) -> str | None:
    if len(mine) != len(theirs):
        return f"{len(mine)} parameter group(s), baseline {len(theirs)}"
    for i, (a, b) in enumerate(zip(mine, theirs)):
        keys = sorted(set(a) & set(b)) if common_keys else sorted(set(a) | set(b))
        for key in keys:
            if a.get(key, "(unset)") != b.get(key, "(unset)"):
                return f"group {i} {key} = {a.get(key, '(unset)')!r}, baseline {b.get(key, '(unset)')!r}"
    return None


def optimizer_problems(report: WitnessReport, base: WitnessReport, *, impl_knob_moved: bool) -> list[str]:
    """What differs between the candidate's optimizers and the baseline's (empty: the same)."""
    mine, theirs = report.optimizer, base.optimizer
    if len(mine) != len(theirs):
        return [f"{len(mine)} optimizer(s) stepped, baseline {len(theirs)}"]
    last = min(report.optimizer_steps, base.optimizer_steps)
    problems = []
    for i, (a, b) in enumerate(zip(mine, theirs)):
        name = f"optimizer {i} ({a.get('family')})" if len(mine) > 1 else str(a.get("family"))
        family_moved = a.get("family") != b.get("family")
        if family_moved and not impl_knob_moved:
            problems.append(f"{a.get('family')} instead of the baseline's {b.get('family')}")
            continue
        for key, what in (("members", "parameters per group at its first step"),
                          ("members_at_end", "parameters per group at the end")):
            if a.get(key) != b.get(key):
                sizes = [len(g) for g in a.get(key) or []]
                base_sizes = [len(g) for g in b.get(key) or []]
                problems.append(f"{name}: {what} differ (groups of {sizes} tensors, baseline {base_sizes})")
                break
        steps = sorted({int(s) for s, _ in (*a.get("timeline", ()), *b.get("timeline", ())) if int(s) <= last})
        for step in steps:
            diff = _group_diff(_settings_at(a.get("timeline", ()), step) or [],
                               _settings_at(b.get("timeline", ()), step) or [], common_keys=family_moved)
            if diff is not None:
                problems.append(f"{name} at optimizer step {step}: {diff}")
                break
        if a.get("state_dtypes") != b.get("state_dtypes"):
            problems.append(f"{name}: state kept in {a.get('state_dtypes')}, baseline {b.get('state_dtypes')}")
    return problems
