"""What a framework itself refuses, drafted as constraints so that no trial is spent learning it.

Hugging Face ``TrainingArguments`` raises ``ValueError`` before the first step
for two combinations that a search over its precision flags would otherwise try:

- ``fp16`` and ``bf16`` together ("At most one of fp16 and bf16 can be True");
- ``bf16`` on a machine with no GPU unless ``use_cpu`` is set ("Your setup doesn't
  support bf16/gpu. You need to assign use_cpu if you want to train the model on
  CPU"). Seen on a 16-core AMX Xeon: every bf16 candidate of an HF job crashed,
  though bf16 is the fastest dtype there. Where ``init`` runs on such a machine
  (the local executor's), ``use_cpu`` becomes a knob and bf16 requires it; on a
  CPU-only machine the Trainer runs on the CPU either way, so ``use_cpu`` changes
  nothing else.
"""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any

from bot.stages.init.classify import Classified


def machine_has_gpu() -> bool:
    """Whether this machine shows an NVIDIA or AMD GPU, without importing torch (init stays fast)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd") or shutil.which("nvidia-smi"))


def hf_precision_rules(knobs: dict[str, dict[str, Any]], classified: Classified, given: dict[str, str], *,
                       has_gpu: bool) -> list[dict[str, Any]]:
    """Constraints (and the ``use_cpu`` knob, added to ``knobs``) for HF's precision flags."""
    hf = {s.key for s, _ in classified.free if s.convention == "hf"}
    precision = [k for k in ("bf16", "fp16") if k in hf and knobs.get(k, {}).get("kind") == "bool"]
    rules: list[dict[str, Any]] = []
    if len(precision) == 2:
        rules.append({"kind": "forbid", "when": {"bf16": True, "fp16": True},
                      "reason": "TrainingArguments refuses fp16 and bf16 together"})
    pinned = any(flag in given for flag in ("--use_cpu", "--no_cuda"))
    if "bf16" in precision and not has_gpu and not pinned and "use_cpu" not in knobs:
        knobs["use_cpu"] = {"flag": "--use_cpu", "kind": "bool", "default": False}
        rules.append({"kind": "forbid", "when": {"bf16": True, "use_cpu": False},
                      "reason": "TrainingArguments refuses bf16 without a GPU unless use_cpu is set "
                                "(on this GPU-less machine the Trainer runs on the CPU either way)"})
    return rules
