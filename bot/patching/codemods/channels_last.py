"""Channels-last memory format for convolutional models, inside the model's own code.

A convolution over an NCHW tensor makes cuDNN (and oneDNN on CPUs) transpose to
NHWC and back around every layer; tensor-core convolution kernels want NHWC. The
recipe public image trainers use behind ``--channels-last`` (timm's ``train.py``:
``model.to(memory_format=torch.channels_last)`` once, then
``input.contiguous(memory_format=torch.channels_last)`` per batch; MosaicML
Composer's ``apply_channels_last``; PyTorch's memory-format tutorial) is written
here where the contract lets a patch write, the root model class::

    class Net(nn.Module):
        def __init__(self):
            ...                                   # the original body
            self.to(memory_format=torch.channels_last)

        def forward(self, x):
            if isinstance(x, torch.Tensor) and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            ...

Only *root* classes (a ``forward``, built by no other class of the file) whose
layers include ``nn.Conv2d``/``nn.ConvTranspose2d`` — directly or through other
classes of the file — are edited; ``Module.to(memory_format=...)`` converts the
4-D parameters of every submodule, so the blocks need nothing. A 3-D model
(``nn.Conv3d``) gets ``torch.channels_last_3d`` and 5-D inputs; a model with both
kinds is declined (each format only exists for one rank, and ``Module.to`` would
raise on the other). The input conversion is guarded by its rank, so a model
that is also fed other inputs keeps working. The layout changes which
convolution algorithms run, so results differ within float tolerance; the loss
check decides. A model with no convolution is declined: the layout buys nothing; so is an
attention module (a transformer's, by its name or its softmax), whose inputs are sequences.
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.codemod import SkipFile

from bot.patching.codemods import exprs as E
from bot.patching.codemods.autocast_forward import is_docstring, root_modules
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import covers

_NN = ("torch.nn", "torch.nn.modules.conv")
_CONV_2D = frozenset(f"{m}.{c}" for m in _NN
                     for c in ("Conv2d", "ConvTranspose2d", "LazyConv2d", "LazyConvTranspose2d"))
_CONV_3D = frozenset(f"{m}.{c}" for m in _NN
                     for c in ("Conv3d", "ConvTranspose3d", "LazyConv3d", "LazyConvTranspose3d"))
_FORMAT = {"2d": ("torch.channels_last", 4), "3d": ("torch.channels_last_3d", 5)}
#: A root class that is an attention module (a transformer's, whose inputs are (B, T, C) sequences), even when it
#: builds a convolution (a 1x1 projection, a patch embedding): the layout buys nothing there.
_ATTENTION_NAME = re.compile(r"Attention|Attn|MultiHead", re.I)
_ATTENTION_CALL = re.compile(r"\bsoftmax\(|scaled_dot_product_attention\(|flash_attn")


class ChannelsLast(PatchCodemod):
    NAME = "channels_last"
    SUMMARY = ("convolutional root model → self.to(memory_format=torch.channels_last) at the end of __init__, "
               "its 4-D input made channels-last at the top of forward (channels_last_3d for Conv3d)")
    NOT_FOUND = ("no nn.Module subclass of the file builds nn.Conv2d/nn.Conv3d layers outside an attention module "
                 "(channels-last only helps convolutional models)")
    NEEDS = ("Conv",)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self.start(tree)
        if not any(bound == "torch" or bound.startswith("torch.") for bound in self.bindings.values()):
            raise SkipFile(self.NO_TORCH)
        self._plan: dict[str, tuple[str, int, str]] = {}  # class → (format, rank, forward's input)
        kinds = self._conv_kinds(tree)
        for name in sorted(root_modules(tree)):
            if kinds.get(name):
                self._plan_class(tree, name, kinds[name])
        if not self._plan:
            raise SkipFile(self.why_not())
        updated = tree.visit(self)
        if not self.edited:
            raise SkipFile(self.why_not())
        return updated

    # -- which classes, and can both edits be made -----------------------------------------

    def _conv_kinds(self, tree: cst.Module) -> dict[str, set[str]]:
        """Per top-level class, the convolution ranks it builds itself or through other classes of the file."""
        codemod = self
        classes = {s.name.value: s for s in tree.body if isinstance(s, cst.ClassDef)}
        direct: dict[str, set[str]] = {}
        uses: dict[str, set[str]] = {}
        for name, cls in classes.items():
            found: set[str] = set()
            called: set[str] = set()

            class _Calls(cst.CSTVisitor):
                def visit_Call(self, call: cst.Call) -> None:
                    if codemod.is_call_to(call, _CONV_2D):
                        found.add("2d")
                    elif codemod.is_call_to(call, _CONV_3D):
                        found.add("3d")
                    elif isinstance(call.func, cst.Name) and call.func.value in classes:
                        called.add(call.func.value)

            cls.visit(_Calls())
            # a convolution inside an attention module (talking heads, a 1x1 projection) mixes attention maps or
            # sequence features, not an image batch: it makes no model built of it convolutional
            attention = _ATTENTION_NAME.search(name) or _ATTENTION_CALL.search(self.module_node.code_for_node(cls))
            direct[name], uses[name] = (set() if attention else found), called - {name}
        kinds = {name: set(found) for name, found in direct.items()}
        changed = True
        while changed:
            changed = False
            for name, called in uses.items():
                for other in called:
                    if not kinds[other] <= kinds[name]:
                        kinds[name] |= kinds[other]
                        changed = True
        return kinds

    def _plan_class(self, tree: cst.Module, name: str, kinds: set[str]) -> None:
        cls = next(s for s in tree.body if isinstance(s, cst.ClassDef) and s.name.value == name)
        where = f"`{name}`"
        if len(kinds) > 1:
            self._decline_at(name, f"{where} mixes 2-D and 3-D convolutions; one memory format cannot fit both")
            return
        if "channels_last" in self.module_node.code:  # timm-style `if args.channels_last: model.to(...)` too
            self._decline_at(name, "the file already uses the channels-last memory format")
            return
        methods = {m.name.value: m for m in cls.body.body if isinstance(m, cst.FunctionDef)}
        init, forward = methods.get("__init__"), methods["forward"]
        if _ATTENTION_NAME.search(name) or _ATTENTION_CALL.search(self.module_node.code_for_node(forward)):
            self._decline_at(name, f"{where} computes attention over a sequence, not a convolutional model's image "
                             "batch; channels-last only helps convolutions")
            return
        if init is None or not isinstance(init.body, cst.IndentedBlock):
            self._decline_at(name, f"{where} has no __init__ body to convert its parameters in")
            return
        if any(isinstance(s, cst.Return) for s in E.statements_in(init)):
            self._decline_at(name, f"`{name}.__init__` returns early; the conversion could be skipped")
            return
        params = [p for p in forward.params.params if p.name.value != "self"]
        if not params or not isinstance(forward.body, cst.IndentedBlock):
            self._decline_at(name, f"`{name}.forward` takes no positional input to convert")
            return
        blocked = [f"{name}.{m}" for m in ("__init__", "forward") if not self._allowed(f"{name}.{m}")]
        if blocked:
            self._decline_at(name, f"convolutional model {where} found but {', '.join(blocked)} is outside the "
                             f"patch targets ({', '.join(sorted(self.scope or ()))}); both its __init__ and "
                             "forward must change")
            return
        memory_format, rank = _FORMAT[kinds.pop()]
        self._plan[name] = (memory_format, rank, params[0].name.value)

    def _allowed(self, qualified: str) -> bool:
        return self.scope is None or any(covers(entry, qualified) for entry in self.scope)

    def _decline_at(self, name: str, reason: str) -> None:
        line = f"{name}: {reason}"
        if line not in self.declined:
            self.declined.append(line)

    # -- the edits --------------------------------------------------------------------------

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        owner = self.owner_class
        if owner is None or len(self._nodes) != 2 or owner.name.value not in self._plan:
            return updated_node
        memory_format, rank, value = self._plan[owner.name.value]
        body = updated_node.body
        assert isinstance(body, cst.IndentedBlock)
        statements = list(body.body)
        fmt = self.ref(memory_format)
        if original_node.name.value == "__init__":
            convert = cst.parse_statement("self.to(memory_format=FORMAT)")
            statements.append(_replace_name(convert, "FORMAT", fmt))
        elif original_node.name.value == "forward":
            guard = cst.parse_statement(
                f"if isinstance({value}, TENSOR) and {value}.dim() == {rank}:\n"
                f"    {value} = {value}.contiguous(memory_format=FORMAT)\n")
            guard = _replace_name(_replace_name(guard, "FORMAT", fmt), "TENSOR", self.ref("torch.Tensor"))
            at = 1 if statements and is_docstring(statements[0]) else 0
            statements.insert(at, guard)  # the first statement keeps its comments
        else:
            return updated_node
        self.mark_edited()
        return updated_node.with_changes(body=body.with_changes(body=statements))


def _replace_name(node: cst.BaseStatement, name: str, value: cst.BaseExpression) -> cst.BaseStatement:
    """``node`` with every bare ``name`` replaced by ``value`` (a placeholder in a parsed template)."""

    class _Swap(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            return value if updated.value == name else updated

    swapped = node.visit(_Swap())
    assert isinstance(swapped, cst.BaseStatement)
    return swapped


__all__ = ["ChannelsLast"]
