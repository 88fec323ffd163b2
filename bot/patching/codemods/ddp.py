"""Gradient accumulation under DDP: all-reduce once per optimizer step, not once per micro-batch.

``DistributedDataParallel`` all-reduces the gradients in every ``backward()``.
With gradient accumulation only the last micro-batch's all-reduce is needed:
inside ``model.no_sync()`` the gradients just accumulate locally, and the last
backward all-reduces the accumulated sum, which is the same average (up to the
float summation order). Matches a loop over micro-batches in a function that
takes the model as a parameter, calls it and calls ``.backward()``::

    for x, y in micro_batches:
        loss = model(x, y)
        (loss / n).backward()

and runs every iteration but the last under ``model.no_sync()`` (only when the
model has it, so the same code still runs unwrapped). The body is repeated in
both branches rather than choosing a context manager, so no import is added.
"""

from __future__ import annotations

import libcst as cst

from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

_INDEX = "_micro_step"


class _Finder(cst.CSTVisitor):
    def __init__(self, params: set[str]) -> None:
        self.params = params
        self.called: list[str] = []
        self.backward = False
        self.no_sync = False

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value in self.params:
            self.called.append(node.func.value)
        if isinstance(node.func, cst.Attribute):
            if node.func.attr.value == "backward":
                self.backward = True
            if node.func.attr.value == "no_sync":
                self.no_sync = True


class DdpNoSync(PatchCodemod):
    NAME = "ddp_no_sync"
    NEEDS = ("DistributedDataParallel",)  # only files of DDP jobs
    SUMMARY = "gradient accumulation loop → every micro-step but the last under model.no_sync() (one all-reduce)"
    NOT_FOUND = "no loop over micro-batches that calls a model parameter and .backward() in the targets"

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.BaseStatement:
        fn = self.function
        if fn is None or original_node.orelse is not None or original_node.asynchronous is not None:
            return updated_node
        params = {p.name.value for p in fn.params.params}
        finder = _Finder(params)
        original_node.body.visit(finder)
        if not finder.backward or not finder.called:
            return updated_node
        if finder.no_sync:
            self.decline("the accumulation loop already uses no_sync()")
            return updated_node
        if not isinstance(original_node.iter, cst.Name):
            self.decline(f"accumulation loop over `{code_of(original_node.iter)}`, not a named sequence whose "
                         "length tells the last micro-step")
            return updated_node
        if not self.site_allowed("gradient accumulation loop"):
            return updated_node
        model = finder.called[0]
        seq = original_node.iter.value
        body = updated_node.body
        if not isinstance(body, cst.IndentedBlock):
            body = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=list(body.body))])
        with_sync = cst.With(items=[cst.WithItem(item=cst.parse_expression(f"{model}.no_sync()"))], body=body)
        branch = cst.If(
            test=cst.parse_expression(f'{_INDEX} < len({seq}) - 1 and hasattr({model}, "no_sync")'),
            body=cst.IndentedBlock(body=[with_sync]),
            orelse=cst.Else(body=body),
        )
        target = code_of(original_node.target)
        if isinstance(original_node.target, cst.Tuple):
            target = f"({target})" if not target.startswith("(") else target
        header = cst.parse_statement(f"for {_INDEX}, {target} in enumerate({seq}):\n    pass\n")
        assert isinstance(header, cst.For)
        self.mark_edited()
        return header.with_changes(body=cst.IndentedBlock(body=[branch]), leading_lines=updated_node.leading_lines)
