"""Speed settings through the framework's own arguments, where the code builds its configuration.

A Hugging Face ``TrainingArguments(...)`` or a Lightning ``Trainer(...)`` built in
editable code is where the field turns on mixed precision, a fused optimizer or
``torch.compile`` — not by wrapping the framework's training loop, which is not
the user's code. When those arguments come from the command line instead
(``HfArgumentParser``, ``LightningCLI``), ``init`` drafts them as launch knobs and
these codemods find no call to edit.

Each codemod sets one keyword of one family of calls:

- ``hf_bf16``: ``TrainingArguments(..., bf16=True)`` — the Trainer autocasts forward
  and loss to bf16 (CPU or CUDA); declined where ``fp16`` is on (exclusive);
- ``hf_fused_optim``: ``optim="adamw_torch_fused"`` where the optimizer is the
  default AdamW (``adamw_torch``/``adamw_hf`` or not given); another optimizer is left alone;
- ``hf_torch_compile``: ``torch_compile=True``;
- ``lightning_bf16_precision``: ``Trainer(..., precision="bf16-mixed")`` where
  precision is full fp32 (``32``, ``"32"``, ``"32-true"`` or not given);
- ``hf_tf32`` (GPU only): ``tf32=transformers.utils.is_torch_tf32_available()``. Not a
  literal ``True``: ``TrainingArguments`` raises ``ValueError`` for ``tf32=True`` on a CPU or
  a pre-Ampere GPU, so the value asks the same check the Trainer does and is off where TF32
  does not exist; an explicit ``tf32=False`` is the user's numerics choice and kept;
- ``lightning_benchmark`` (GPU only): ``Trainer(..., benchmark=True)``, cuDNN autotuning of
  convolutions; declined where ``deterministic`` is on (benchmarking picks algorithms by
  timing) or the Trainer is pinned to the CPU (``accelerator="cpu"``).

Both GPU-only settings are declined where the call pins the job to the CPU
(``use_cpu=True``/``no_cuda=True``; ``accelerator="cpu"``): there they change nothing.

A value given by an expression (``bf16=args.bf16``) is the user's decision and
left to the launch knobs; a call that passes ``**kwargs`` is declined, since the
mapping may already set the keyword.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst
from libcst.codemod import SkipFile

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

_HF_ARGUMENTS = frozenset({
    "transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments",
    "transformers.training_args.TrainingArguments", "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
})
_LIGHTNING_TRAINER = frozenset({
    "lightning.Trainer", "lightning.pytorch.Trainer", "lightning.pytorch.trainer.Trainer",
    "lightning.pytorch.trainer.trainer.Trainer", "pytorch_lightning.Trainer",
    "pytorch_lightning.trainer.Trainer", "pytorch_lightning.trainer.trainer.Trainer",
})
_ABSENT = object()


def _literal(node: cst.BaseExpression) -> object:
    """The Python value of a literal keyword value (bool, int, str, None), else ``_ABSENT``."""
    node = E.strip(node)
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    return _ABSENT


class _FrameworkSetting(PatchCodemod):
    """Give ``KEYWORD`` the value ``VALUE`` in every call to ``CALLS`` inside the targets."""

    CALLS: ClassVar[frozenset[str]] = frozenset()
    FRAMEWORKS: ClassVar[tuple[str, ...]] = ()  # top-level modules; the file must import one
    KEYWORD: ClassVar[str] = ""
    VALUE: ClassVar[str] = ""  # Python source of the new value
    # Literal values that mean the slow default and may be replaced; "not given" always may.
    REPLACES: ClassVar[tuple[object, ...]] = ()
    # Keywords that, when on, rule this edit out (``fp16`` for bf16).
    EXCLUSIVE: ClassVar[tuple[str, ...]] = ()
    # Literal values that already turn the setting on (for a VALUE that is not a literal).
    ALREADY: ClassVar[tuple[object, ...]] = ()
    # (keyword, literal value) pairs that pin the job to the CPU, where a GPU-only setting changes nothing.
    CPU_PINS: ClassVar[tuple[tuple[str, object], ...]] = ()

    def new_value(self) -> cst.BaseExpression:
        """The expression the keyword is given (``VALUE`` unless a subclass needs the file's imports)."""
        return E.expr(self.VALUE)

    @classmethod
    def precheck(cls, source: str) -> str | None:
        if not any(framework in source for framework in cls.FRAMEWORKS):
            return f"the file does not import {cls.FRAMEWORKS[0]}"
        if not any(name.rsplit(".", 1)[-1] in source for name in cls.CALLS):
            return cls.NOT_FOUND
        return None

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # The framework, not torch, is what such a file imports (a Trainer script may never say `torch`).
        self.start(tree)
        if not any(bound.split(".")[0] in self.FRAMEWORKS for bound in self.bindings.values()):
            raise SkipFile(f"the file does not import {self.FRAMEWORKS[0]}")
        updated = tree.visit(self)
        if not self.edited:
            raise SkipFile(self.why_not())
        return updated

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not self.is_call_to(original_node, self.CALLS):
            return updated_node
        what = f"`{code_of(original_node.func)}(...)`"
        if E.has_star(original_node):
            self.decline(f"{what} passes */** arguments that may already set {self.KEYWORD}")
            return updated_node
        for other in self.EXCLUSIVE:
            given = E.keyword(original_node, other)
            if given is not None and _literal(given.value) not in (False, None, 0):
                self.decline(f"{what} sets {other}={code_of(given.value)}; {self.KEYWORD} is not combined with it")
                return updated_node
        for pin, pinned in self.CPU_PINS:
            given = E.keyword(original_node, pin)
            if given is not None and _literal(given.value) == pinned:
                self.decline(f"{what} pins the job to the CPU ({pin}={code_of(given.value)}); {self.KEYWORD} "
                             "only acts on CUDA")
                return updated_node
        current = E.keyword(original_node, self.KEYWORD)
        if current is not None:
            value = _literal(current.value)
            if value is _ABSENT:
                self.decline(f"{what} sets {self.KEYWORD} from an expression ({code_of(current.value)}); "
                             "left to the launch knobs")
                return updated_node
            if value == _literal(E.expr(self.VALUE)) or value in self.ALREADY:
                self.decline(f"{what} already has {self.KEYWORD}={self.VALUE}")
                return updated_node
            if value not in self.REPLACES:
                self.decline(f"{what} chose {self.KEYWORD}={code_of(current.value)}, which this codemod "
                             "does not replace")
                return updated_node
        if not self.site_allowed(what):
            return updated_node
        self.mark_edited()
        if current is not None:
            return E.set_arg_value(updated_node, self.KEYWORD, self.new_value())
        return E.insert_arg(updated_node, E.kwarg(self.KEYWORD, self.new_value()))


class HfBf16(_FrameworkSetting):
    NAME = "hf_bf16"
    SUMMARY = "transformers.TrainingArguments(...) → bf16=True (the Trainer autocasts forward and loss to bf16)"
    NOT_FOUND = "no transformers TrainingArguments(...) call in the targets"
    CALLS, FRAMEWORKS, KEYWORD, VALUE = _HF_ARGUMENTS, ("transformers",), "bf16", "True"
    REPLACES = (False,)
    EXCLUSIVE = ("fp16",)


class HfFusedOptim(_FrameworkSetting):
    NAME = "hf_fused_optim"
    SUMMARY = 'transformers.TrainingArguments(...) → optim="adamw_torch_fused" (torch\'s fused AdamW kernel)'
    NOT_FOUND = "no transformers TrainingArguments(...) call in the targets"
    CALLS, FRAMEWORKS, KEYWORD, VALUE = _HF_ARGUMENTS, ("transformers",), "optim", '"adamw_torch_fused"'
    REPLACES = ("adamw_torch", "adamw_hf")


class HfTorchCompile(_FrameworkSetting):
    NAME = "hf_torch_compile"
    SUMMARY = "transformers.TrainingArguments(...) → torch_compile=True (the Trainer compiles the model)"
    NOT_FOUND = "no transformers TrainingArguments(...) call in the targets"
    CALLS, FRAMEWORKS, KEYWORD, VALUE = _HF_ARGUMENTS, ("transformers",), "torch_compile", "True"
    REPLACES = (False,)


class LightningBf16Precision(_FrameworkSetting):
    NAME = "lightning_bf16_precision"
    SUMMARY = 'lightning Trainer(...) → precision="bf16-mixed" (autocast to bf16, weights kept in fp32)'
    NOT_FOUND = "no lightning Trainer(...) call in the targets"
    FRAMEWORKS = ("lightning", "pytorch_lightning")
    CALLS, KEYWORD, VALUE = _LIGHTNING_TRAINER, "precision", '"bf16-mixed"'
    REPLACES = (32, "32", "32-true", None)


class HfTf32(_FrameworkSetting):
    NAME = "hf_tf32"
    SUMMARY = ("transformers.TrainingArguments(...) → tf32=transformers.utils.is_torch_tf32_available() "
               "(TF32 matmuls where the GPU has them; GPU only)")
    NOT_FOUND = "no transformers TrainingArguments(...) call in the targets"
    CALLS, FRAMEWORKS, KEYWORD = _HF_ARGUMENTS, ("transformers",), "tf32"
    VALUE = "transformers.utils.is_torch_tf32_available()"
    REPLACES = (None,)
    ALREADY = (True,)
    CPU_PINS = (("use_cpu", True), ("no_cuda", True))

    def new_value(self) -> cst.BaseExpression:
        return cst.Call(func=self.ref("transformers.utils.is_torch_tf32_available"))


class LightningBenchmark(_FrameworkSetting):
    NAME = "lightning_benchmark"
    SUMMARY = "lightning Trainer(...) → benchmark=True (cuDNN autotunes each convolution shape; GPU only)"
    NOT_FOUND = "no lightning Trainer(...) call in the targets"
    FRAMEWORKS = ("lightning", "pytorch_lightning")
    CALLS, KEYWORD, VALUE = _LIGHTNING_TRAINER, "benchmark", "True"
    REPLACES = (None,)
    EXCLUSIVE = ("deterministic",)
    CPU_PINS = (("accelerator", "cpu"),)
