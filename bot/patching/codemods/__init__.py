"""The codemod registry: name → libcst codemod, and one way to run any of them on one file.

A ``PatchSpec`` of kind ``codemod`` names one of these. Running one never
raises: the outcome is ``Rewritten`` (new code, edited symbols, added imports),
``Declined`` (the file lacks the pattern; the reason says what was looked for
and why each candidate did not fit) or ``Broken`` (the codemod crashed or the
file does not parse).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Collection, Mapping

from libcst.codemod import CodemodContext, TransformFailure, TransformSkip, TransformSuccess, transform_module

from bot.patching.codemods.attention import CausalAttentionToSDPA
from bot.patching.codemods.autocast import AutocastBf16
from bot.patching.codemods.autocast_forward import AutocastForwardBf16
from bot.patching.codemods.autocast_fp16 import AutocastFp16Scaler
from bot.patching.codemods.base import PatchCodemod
from bot.patching.codemods.channels_last import ChannelsLast
from bot.patching.codemods.checkpointing import CheckpointBlocks
from bot.patching.codemods.compile import CompileModel
from bot.patching.codemods.ddp import DdpNoSync
from bot.patching.codemods.experts import GroupedExperts
from bot.patching.codemods.framework_args import (HfBf16, HfFusedOptim, HfTf32, HfTorchCompile, LightningBenchmark,
                                                  LightningBf16Precision)
from bot.patching.codemods.gelu import GeluFormulaToFused
from bot.patching.codemods.gpu_settings import CudaBackendFlags, DataLoaderGpuSettings
from bot.patching.codemods.loss import UnfusedLossToCrossEntropy
from bot.patching.codemods.optimizer import OptimizerForeach, OptimizerFused, ZeroGradSetToNone
from bot.patching.results import Broken, Declined, FileOutcome, Rewritten

_ALL: tuple[type[PatchCodemod], ...] = (
    CausalAttentionToSDPA,
    GeluFormulaToFused,
    UnfusedLossToCrossEntropy,
    OptimizerForeach,
    OptimizerFused,
    ZeroGradSetToNone,
    CheckpointBlocks,
    AutocastBf16,
    AutocastForwardBf16,
    CompileModel,
    DataLoaderGpuSettings,
    CudaBackendFlags,
    GroupedExperts,
    DdpNoSync,
    HfBf16,
    HfFusedOptim,
    HfTorchCompile,
    LightningBf16Precision,
    ChannelsLast,
    AutocastFp16Scaler,
    HfTf32,
    LightningBenchmark,
)

REGISTRY: Mapping[str, type[PatchCodemod]] = MappingProxyType({c.NAME: c for c in _ALL})


def describe() -> dict[str, str]:
    """Name → one-line summary, for prompts and ``infrarsi patches``."""
    return {name: codemod.SUMMARY for name, codemod in sorted(REGISTRY.items())}


def run_codemod(name: str, source: str, *, scope: Collection[str] | None = None) -> FileOutcome:
    """Run the registered codemod ``name`` on ``source``, editing only inside ``scope``
    (qualified names in this file; None for the whole file)."""
    codemod_class = REGISTRY.get(name)
    if codemod_class is None:
        return Broken(error=f"no codemod named {name!r} (known: {', '.join(sorted(REGISTRY))})")
    early = codemod_class.precheck(source)
    if early is not None:
        return Declined(reason=early)
    codemod = codemod_class(CodemodContext(), scope=scope)
    result = transform_module(codemod, source)
    if isinstance(result, TransformSuccess):
        if result.code == source:
            return Declined(reason=codemod.why_not() if codemod.declined else "the codemod changed nothing")
        return Rewritten(code=result.code, symbols=tuple(codemod.edited),
                         added_imports=tuple(codemod.imports_added))
    if isinstance(result, TransformSkip):
        return Declined(reason=result.skip_description)
    if isinstance(result, TransformFailure):
        return Broken(error=f"{type(result.error).__name__}: {result.error}")
    return Broken(error="interrupted")


__all__ = ["REGISTRY", "PatchCodemod", "describe", "run_codemod"]
