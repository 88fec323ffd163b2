"""The optimizer's and float32 math's settings, as the witness read them, held to the baseline's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from infrarsi.witness import WitnessReport
from infrarsi.witnessed_settings import fp32_precision, math_problems, optimizer_problems

ADAMW = {"amsgrad": False, "betas": [0.9, 0.95], "eps": 1e-8, "lr": 6e-4, "maximize": False, "weight_decay": 0.1}
SHAPES = [[[128, 32], [32, 32], [32]]]
MATH = {"float32_matmul_precision": "highest", "cuda.matmul.allow_tf32": False, "cudnn.allow_tf32": True,
        "cuda.matmul.allow_bf16_reduced_precision_reduction": True, "cudnn.conv.fp32_precision": "tf32",
        "cudnn.rnn.fp32_precision": "tf32", "mkldnn.matmul.fp32_precision": "none", "default_dtype": "float32"}


def _optimizer(*, family: str = "AdamW", groups: list[dict[str, Any]] | None = None,
               timeline: list | None = None, members: list | None = None,
               state: dict | None = None) -> dict[str, Any]:
    groups = groups if groups is not None else [ADAMW]
    return {"family": family, "timeline": timeline if timeline is not None else [[1, groups]],
            "members": members if members is not None else SHAPES,
            "members_at_end": members if members is not None else SHAPES,
            "state_dtypes": state if state is not None else {"exp_avg": ["float32"], "exp_avg_sq": ["float32"]}}


def _report(optimizer: list[dict[str, Any]] | None = None, math: list | None = None) -> WitnessReport:
    return WitnessReport(optimizer_steps=8, count_step=4, flops=1, flops_by_op=(), matmul_dtypes=("float32",),
                         counted_s=0.1, params=3, param_elements=4160, grad_norms=(), weight_norms=(),
                         update_proj=(), tampered=(), source_sha256="x",
                         optimizer=tuple(optimizer if optimizer is not None else [_optimizer()]),
                         math=tuple((s, m) for s, m in (math if math is not None else [[1, MATH]])))


BASE = _report()


def test_the_same_optimizer_with_another_implementation_is_the_same() -> None:
    assert optimizer_problems(BASE, BASE, impl_knob_moved=False) == []


def test_weight_decay_dropped_in_a_fused_rewrite_is_named() -> None:
    fused = _report([_optimizer(groups=[{**ADAMW, "weight_decay": 0.0}])])
    problems = optimizer_problems(fused, BASE, impl_knob_moved=False)
    assert problems and "weight_decay = 0.0, baseline 0.1" in problems[0]


def test_torch_default_betas_and_eps_are_named() -> None:
    default = _report([_optimizer(groups=[{**ADAMW, "betas": [0.9, 0.999], "eps": 1e-8}])])
    assert "betas" in optimizer_problems(default, BASE, impl_knob_moved=False)[0]


def test_a_no_decay_group_is_a_different_optimizer() -> None:
    split = _report([_optimizer(groups=[ADAMW, {**ADAMW, "weight_decay": 0.0}],
                                members=[[[128, 32], [32, 32]], [[32]]])])
    problems = optimizer_problems(split, BASE, impl_knob_moved=False)
    assert problems and ("group" in problems[0] or "parameters per group" in problems[0])


def test_a_schedule_rewritten_after_warm_up_is_named_at_its_step() -> None:
    timeline = [[1, [ADAMW]], [5, [{**ADAMW, "lr": 1.2e-3}]]]
    problems = optimizer_problems(_report([_optimizer(timeline=timeline)]), BASE, impl_knob_moved=False)
    assert problems and "at optimizer step 5" in problems[0] and "lr" in problems[0]


def test_optimizer_state_in_bf16_is_named() -> None:
    low = _report([_optimizer(state={"exp_avg": ["bfloat16"], "exp_avg_sq": ["bfloat16"]})])
    assert "state kept in" in optimizer_problems(low, BASE, impl_knob_moved=False)[0]


def test_another_class_only_where_a_knob_decides_the_implementation() -> None:
    other = _report([_optimizer(family="FusedAdam", groups=[{**ADAMW, "bias_correction": True}])])
    assert "instead of the baseline's AdamW" in optimizer_problems(other, BASE, impl_knob_moved=False)[0]
    assert optimizer_problems(other, BASE, impl_knob_moved=True) == []  # common settings compared, all equal
    wrong = _report([_optimizer(family="FusedAdam", groups=[{**ADAMW, "weight_decay": 0.0}])])
    assert optimizer_problems(wrong, BASE, impl_knob_moved=True)


def test_a_second_optimizer_is_named() -> None:
    assert "2 optimizer(s)" in optimizer_problems(_report([_optimizer(), _optimizer()]), BASE,
                                                  impl_knob_moved=False)[0]


def test_medium_float32_matmul_precision_needs_bf16_allowed() -> None:
    medium = _report(math=[[1, {**MATH, "float32_matmul_precision": "medium"}]])
    assert fp32_precision(medium, BASE) == "bfloat16"
    problems = math_problems(medium, BASE, allowed_dtypes=("float32",), tf32_knob_moved=False)
    assert problems and "computes float32 products in bfloat16" in problems[0]
    assert math_problems(medium, BASE, allowed_dtypes=("bfloat16", "float32"), tf32_knob_moved=False) == []


def test_a_setting_lowered_only_inside_the_counted_step_shows() -> None:
    toggled = _report(math=[[1, MATH], [4, {**MATH, "mkldnn.matmul.fp32_precision": "bf16"}], [5, MATH]])
    assert math_problems(toggled, BASE, allowed_dtypes=("float32",), tf32_knob_moved=False)


def test_tf32_where_a_knob_decides_it_or_a_lower_dtype_is_allowed() -> None:
    tf32 = _report(math=[[1, {**MATH, "cuda.matmul.allow_tf32": True}]])
    assert math_problems(tf32, BASE, allowed_dtypes=("float32",), tf32_knob_moved=False)
    assert math_problems(tf32, BASE, allowed_dtypes=("float32",), tf32_knob_moved=True) == []
    assert math_problems(tf32, BASE, allowed_dtypes=("bfloat16", "float32"), tf32_knob_moved=False) == []


def test_the_baselines_own_tf32_is_no_change_and_more_precision_is_no_problem() -> None:
    on = _report(math=[[1, {**MATH, "cuda.matmul.allow_tf32": True}]])
    same_in_other_words = _report(math=[[1, {**MATH, "cuda.matmul.allow_tf32": True,
                                             "float32_matmul_precision": "high"}]])
    assert math_problems(same_in_other_words, on, allowed_dtypes=("float32",), tf32_knob_moved=False) == []
    off = _report(math=[[1, {**MATH, "cudnn.allow_tf32": False}]])
    assert math_problems(off, BASE, allowed_dtypes=("float32",), tf32_knob_moved=False) == []


def test_a_baseline_read_before_math_was_witnessed_compares_nothing() -> None:
    medium = _report(math=[[1, {**MATH, "float32_matmul_precision": "medium"}]])
    assert math_problems(medium, replace(BASE, math=()), allowed_dtypes=("float32",), tf32_knob_moved=False) == []
