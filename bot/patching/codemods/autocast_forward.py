"""bf16 autocast around the body of the top-level model's ``forward``.

Where the training loop is locked (it usually is: it holds the timing and the
loss), the model call cannot be wrapped there; the model's own ``forward`` is
editable and every forward of the job runs through it. This wraps that body::

    def forward(self, idx, targets=None):
        with torch.autocast(device_type=next(self.parameters()).device.type, dtype=torch.bfloat16):
            ...                       # the original body
            loss = F.cross_entropy(logits.float(), targets)   # the loss's input cast back to fp32

Only the *root* modules of the file are wrapped: classes with a ``forward``
that no other class of the file instantiates or names (a GPT, not its blocks; DeiT's
``Attention_block=Attention`` defaults and ``block_layers=Block`` builder arguments count), so the
same region is not entered once per layer. The device type comes from the
module's own parameters at run time, so the patched code is right on CPU and
GPU. Cross-entropy and NLL losses computed inside the body get their input
cast to fp32, as torch's autocast recipes recommend for reductions over a
large vocabulary. A ``forward`` that already enters autocast is left alone.
The patterns follow what public GPT trainers write (nanoGPT's and
minGPT's ``GPT.forward`` computing the loss from ``targets``, HF-style models
returning logits): a module whose ``forward`` returns logits and, given
targets, the loss.
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from bot.patching.codemods import exprs as E
from bot.patching.codemods.autocast import enters_autocast
from bot.patching.codemods.base import PatchCodemod

_LOSSES = {"torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss"}


class AutocastForwardBf16(PatchCodemod):
    NAME = "autocast_forward_bf16"
    SUMMARY = ("the root model's forward body → wrapped in torch.autocast(<its parameters' device>, "
               "dtype=torch.bfloat16), the loss's input kept in fp32")
    NOT_FOUND = "no nn.Module subclass with a forward that no other class of the file builds"
    NEEDS = ("def forward",)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self.start(tree)
        self._roots = root_modules(tree)
        return super().transform_module_impl(tree)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        owner = self.owner_class
        if original_node.name.value != "forward" or owner is None or len(self._nodes) != 2:
            return updated_node
        if owner.name.value not in self._roots:
            return updated_node
        if not self.site_allowed(f"`{owner.name.value}.forward`"):
            return updated_node
        if enters_autocast(self, original_node):
            self.decline("forward already runs under torch.autocast")
            return updated_node
        body = updated_node.body
        if not isinstance(body, cst.IndentedBlock):
            return updated_node
        statements = list(body.body)
        head: list[cst.BaseStatement] = []
        if statements and is_docstring(statements[0]):
            head.append(statements.pop(0))
        if not statements:
            return updated_node
        statements = [s.visit(_LossInputToFp32(self)) for s in statements]  # type: ignore[misc]
        first = statements[0]
        call = cst.Call(func=self.ref("torch.autocast"), args=[
            E.kwarg("device_type", E.expr("next(self.parameters()).device.type")),
            E.kwarg("dtype", self.ref("torch.bfloat16")),
        ])
        wrapped = cst.With(items=[cst.WithItem(item=call)],
                           body=cst.IndentedBlock(body=[first.with_changes(leading_lines=()), *statements[1:]]),
                           leading_lines=first.leading_lines)
        self.mark_edited()
        return updated_node.with_changes(body=body.with_changes(body=[*head, wrapped]))



class _LossInputToFp32(cst.CSTTransformer):
    """``F.cross_entropy(logits.view(-1, V), y)`` → ``F.cross_entropy(logits.view(-1, V).float(), y)``."""

    def __init__(self, codemod: PatchCodemod) -> None:
        super().__init__()
        self.codemod = codemod

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not self.codemod.is_call_to(original_node, _LOSSES) or not updated_node.args:
            return updated_node
        first = updated_node.args[0]
        if first.keyword is not None or first.star:
            return updated_node
        value = first.value
        if E.method_call(value, "float") is not None:
            return updated_node
        as_float = cst.Call(func=cst.Attribute(value=_parenthesized(value), attr=cst.Name("float")))
        return updated_node.with_changes(args=[first.with_changes(value=as_float), *updated_node.args[1:]])


def _parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(node, cst.Name | cst.Attribute | cst.Call | cst.Subscript) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def is_docstring(statement: cst.BaseStatement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString))


def root_modules(tree: cst.Module) -> set[str]:
    """Top-level classes with a ``forward`` method that no other top-level class of the file builds or names,
    and that no function of the file hands to another class of the file as an argument."""
    classes = {s.name.value: s for s in tree.body if isinstance(s, cst.ClassDef) and s.bases}
    with_forward = {name for name, cls in classes.items()
                    if any(isinstance(member, cst.FunctionDef) and member.name.value == "forward" for member in cls.body.body)}
    built_by_others: set[str] = set()
    for name, cls in classes.items():
        for called in _called_names(cls) | E.names_in(cls):  # E.names_in: `Attention_block=Attention` too
            if called != name and called in classes:
                built_by_others.add(called)
    # a block handed to a builder class (`vit_models(block_layers=Layer_scale_init_Block)`, DeiT's factories)
    for function in (s for s in tree.body if isinstance(s, cst.FunctionDef)):
        built_by_others |= _passed_to_classes(function, set(classes)) & set(classes)
    # a loss module (DeiT's DistillationLoss) computes what is kept in fp32
    losses = {name for name in classes if re.search(r"(Loss|Criterion)$", name)}
    return with_forward - built_by_others - losses


def _passed_to_classes(node: cst.CSTNode, classes: set[str]) -> set[str]:
    """Names handed as arguments to a call of one of ``classes`` (not called themselves)."""
    return {arg.value.value for call in m.findall(node, m.Call(func=m.Name())) if call.func.value in classes
            for arg in call.args if isinstance(arg.value, cst.Name)}


def _called_names(node: cst.CSTNode) -> set[str]:
    names: set[str] = set()

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            func = call.func
            if isinstance(func, cst.Name):
                names.add(func.value)
            elif isinstance(func, cst.Attribute):
                names.add(func.attr.value)

    node.visit(_Calls())
    return names


__all__ = ["AutocastForwardBf16"]
