"""bf16 autocast around the forward pass and loss, on whatever device the batch is on.

Finds, inside the targeted training-step functions, a line that calls the
model (``logits, loss = model(x, y)``, ``out = self.model(batch)``) and wraps it,
together with the loss lines right after it, in::

    with torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16):
        logits, loss = model(x, y)
        loss = loss / accum

The device is read from the model's parameters at run time (not from an
input, which may be a dict or a list), so the same code is right on CPU and GPU. ``backward()``, ``.item()`` and optimizer
calls end the wrapped run: backward outside autocast is what torch recommends.
Functions that already use autocast are left alone. bf16 changes numerics, so
this patch is only kept if the loss-curve check accepts it.
"""

from __future__ import annotations

import re

import libcst as cst

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

AUTOCAST = {"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
             "torch.amp.autocast_mode.autocast"}
# The model object, not anything model-ish: `raw_model(x)` yes, `model_fn(x)` / `build_model(a)` /
# a loop's `module(x)` no.
_MODEL_NAME = re.compile(r"^(?!(build|make|create|get|load|init|setup)_)(model|net|network|[a-z0-9_]+_(model|net))$")
_STOPPERS = {"backward", "step", "zero_grad", "item", "synchronize"}


class AutocastBf16(PatchCodemod):
    NAME = "autocast_bf16"
    SUMMARY = ("model forward + loss → wrapped in torch.autocast(device_type=<input>.device.type, "
               "dtype=torch.bfloat16)")
    NOT_FOUND = "no model call (`out = model(x, ...)`) in the targeted functions"

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        function = self.function
        if function is None or self._uses_autocast(function):
            if function is not None and self._has_model_call(original_node):
                self.decline("the model call already runs under torch.autocast")
            return updated_node
        originals = original_node.body
        body = list(updated_node.body)
        out: list[cst.BaseStatement] = []
        i = 0
        while i < len(originals):
            call = model_call(originals[i])
            if call is not None and isinstance(call.func, cst.Name) and call.func.value in self._not_models():
                call = None  # `build_model(args)` is a function of this file or an import, not the model
            if call is None:
                out.append(body[i])
                i += 1
                continue
            if not self.site_allowed(f"model call `{code_of(call.func)}(...)`"):
                out.append(body[i])
                i += 1
                continue
            end = i + 1
            while end < len(originals) and is_loss_line(originals[end]):
                end += 1
            out.append(self._wrap(body[i:end], call.func))
            self.mark_edited()
            i = end
        return updated_node.with_changes(body=out) if out != body else updated_node

    def _not_models(self) -> set[str]:
        """Names bound by ``def``/``class``/``import`` at module level: callables, not model objects."""
        names = set(self.bindings)
        for statement in self.module_node.body:
            if isinstance(statement, cst.FunctionDef | cst.ClassDef):
                names.add(statement.name.value)
        return names

    def _wrap(self, statements: list[cst.BaseStatement], model: cst.BaseExpression) -> cst.With:
        first = statements[0]
        call = cst.Call(func=self.ref("torch.autocast"), args=[
            E.kwarg("device_type", E.expr(f"next({code_of(model)}.parameters()).device.type")),
            E.kwarg("dtype", self.ref("torch.bfloat16")),
        ])
        inner = [first.with_changes(leading_lines=()), *statements[1:]]
        return cst.With(items=[cst.WithItem(item=call)], body=cst.IndentedBlock(body=inner),
                        leading_lines=first.leading_lines)

    def _uses_autocast(self, function: cst.FunctionDef) -> bool:
        return enters_autocast(self, function)

    @staticmethod
    def _has_model_call(block: cst.IndentedBlock) -> bool:
        return any(model_call(s) is not None for s in block.body)


def model_call(statement: cst.BaseStatement) -> cst.Call | None:
    """The call in ``targets = model(...)`` / ``targets = self.model(...)``."""
    found = E.simple_assign(statement)
    if found is None:
        return None
    value = E.strip(found[1])
    if not isinstance(value, cst.Call):
        return None
    func = value.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if isinstance(func, cst.Attribute) and code_of(func.value) != "self":
        return None
    return value if _MODEL_NAME.match(name) else None


def is_loss_line(statement: cst.BaseStatement) -> bool:
    """An assignment to a ``*loss*`` name that does not end the forward (no backward/step/item)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if not isinstance(small, cst.Assign | cst.AugAssign | cst.AnnAssign):
        return False
    if not any("loss" in name.lower() for name in E.assigned_names(statement)):
        return False
    text = code_of(statement)
    return not any(f".{stop}(" in text for stop in _STOPPERS)


def enters_autocast(codemod: PatchCodemod, function: cst.FunctionDef) -> bool:
    """Whether ``function`` has a ``with torch.autocast(...)`` (however torch was imported)."""
    found = False

    class _With(cst.CSTVisitor):
        def visit_WithItem(self, node: cst.WithItem) -> None:
            nonlocal found
            item = E.strip(node.item)
            if isinstance(item, cst.Call) and codemod.is_call_to(item, AUTOCAST):
                found = True

    function.visit(_With())
    return found
