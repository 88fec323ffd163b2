"""bot.stages.init.framework_rules: what HF TrainingArguments refuses is drafted as constraints."""
from __future__ import annotations

from typing import Any

import pytest

from bot.stages.init.classify import Classified
from bot.stages.init.framework_rules import hf_precision_rules, machine_has_gpu
from bot.stages.init.setting import Setting


def _hf(*keys: str) -> Classified:
    return Classified(free=[(Setting(key=k, convention="hf", passing="switch", token=f"--{k}"), "numeric precision")
                            for k in keys])


def _bools(*keys: str) -> dict[str, dict[str, Any]]:
    return {k: {"flag": f"--{k}", "kind": "bool", "default": False} for k in keys}


def test_fp16_and_bf16_together_are_forbidden() -> None:
    knobs = _bools("bf16", "fp16")
    rules = hf_precision_rules(knobs, _hf("bf16", "fp16"), {}, has_gpu=True)
    assert rules == [{"kind": "forbid", "when": {"bf16": True, "fp16": True},
                      "reason": "TrainingArguments refuses fp16 and bf16 together"}]
    assert "use_cpu" not in knobs


def test_bf16_without_a_gpu_adds_use_cpu_and_requires_it() -> None:
    knobs = _bools("bf16")
    rules = hf_precision_rules(knobs, _hf("bf16"), {}, has_gpu=False)
    assert knobs["use_cpu"] == {"flag": "--use_cpu", "kind": "bool", "default": False}
    assert [r["when"] for r in rules] == [{"bf16": True, "use_cpu": False}]


@pytest.mark.parametrize("given", [{"--use_cpu": "true"}, {"--no_cuda": ""}])
def test_a_command_that_pins_the_device_gets_no_use_cpu_knob(given: dict[str, str]) -> None:
    knobs = _bools("bf16")
    assert hf_precision_rules(knobs, _hf("bf16"), given, has_gpu=False) == []
    assert list(knobs) == ["bf16"]


def test_flags_of_other_conventions_or_kinds_get_no_rules() -> None:
    argparse = Classified(free=[(Setting(key=k, convention="argparse", passing="switch", token=f"--{k}"), "")
                                for k in ("bf16", "fp16")])
    assert hf_precision_rules(_bools("bf16", "fp16"), argparse, {}, has_gpu=False) == []
    assert hf_precision_rules({"bf16": {"kind": "choice"}, "fp16": {"kind": "bool"}}, _hf("bf16", "fp16"), {},
                              has_gpu=True) == []


def test_an_empty_cuda_visible_devices_means_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert machine_has_gpu() is False
