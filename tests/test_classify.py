"""bot.stages.init.classify: free speed knobs, fixed task-defining values, coupled micro-batch/accumulation pairs."""
from __future__ import annotations

from typing import Any

from bot.stages.init.classify import classify, current, fixed_reason, free_reason
from bot.stages.init.setting import Setting


def _arg(key: str, default: Any = None, *, convention: str = "argparse", type: str | None = None,
         help: str = "") -> Setting:
    return Setting(key=key, convention=convention, passing="flag-space", token=f"--{key}", default=default,
                   has_default=default is not None, type=type, help=help)


def test_speed_knobs_are_free_and_task_values_are_fixed() -> None:
    out = classify([_arg("dtype", "fp32"), _arg("compile", 0), _arg("lr", 3e-4), _arg("seq_len", 128),
                    _arg("dropout", 0.1), _arg("out_dir", "out")], {})
    assert out.names() == {"free": ["compile", "dtype"], "fixed": ["dropout", "lr", "seq_len"], "coupled": []}
    assert dict((s.key, r) for s, r in out.fixed)["lr"] == "learning rate"


def test_a_micro_batch_and_accumulation_are_coupled_at_their_product() -> None:
    out = classify([_arg("batch_size", 8), _arg("grad_accum", 4)], {"--grad_accum": "2"})
    assert out.names()["coupled"] == ["batch_size*grad_accum"]
    assert out.coupled[0].global_batch == 16  # the command's value wins over the default
    assert out.free == [] and out.fixed == []


def test_a_batch_without_accumulation_is_the_fixed_global_batch() -> None:
    out = classify([_arg("batch_size", 8)], {})
    assert out.fixed[0][1] == "global batch (no gradient accumulation setting to keep it fixed)"


def test_pairs_are_only_formed_within_one_convention() -> None:
    out = classify([_arg("batch_size", 8), _arg("grad_accum", 4, convention="globals")], {})
    assert out.coupled == []
    assert out.names()["fixed"] == ["batch_size"]


def test_a_token_sized_total_frees_the_forward_batch() -> None:
    total = _arg("total_batch_size", 524288, help="total desired batch size, in units of #tokens")
    out = classify([total, _arg("batch_size", 4)], {})
    assert out.token_batch is not None and out.token_batch.total is total
    assert out.names() == {"free": ["batch_size"], "fixed": ["total_batch_size"], "coupled": []}


def test_a_total_that_does_not_say_tokens_is_not_a_token_batch() -> None:
    out = classify([_arg("total_batch_size", 512, help="rows per step"), _arg("batch_size", 4)], {})
    assert out.token_batch is None


def test_current_reads_the_command_then_the_default() -> None:
    s = _arg("compile", False, type="bool")
    assert current(s, {}) is False
    assert current(s, {"--compile": "1"}) == 1  # an int first
    assert current(s, {"--compile": "yes"}) is True
    assert current(_arg("dtype", "fp32"), {"dtype": "bf16"}) == "bf16"
    assert current(_arg("lr", 0.1), {"--lr": "3e-4"}) == 3e-4
    assert current(_arg("name"), {}) is None


def test_reasons_by_name() -> None:
    assert free_reason("num_workers") == "data-loader workers"
    assert free_reason("lr") is None
    assert fixed_reason("global_batch_size") == "global batch"
    assert fixed_reason("max_iters") == "training length"
    assert fixed_reason("wandb_project") is None
