"""Activation checkpointing of the per-block loop (a memory saver that costs recompute).

Rewrites the transformer trunk loop inside a module method::

    for block in self.blocks:            # or self.h, self.transformer.h, self.layers
        x = block(x)

into::

    for block in self.blocks:
        x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if self.training else block(x)

Non-reentrant checkpointing keeps keyword arguments, works under ``no_grad``
and restores the RNG state for the recompute (``preserve_rng_state`` defaults
to True), so dropout draws the same masks: the function computed is unchanged,
only activations are recomputed in backward instead of stored. Evaluation
(``not self.training``) runs the plain call. It declines where the blocks'
forward (read in this file) changes state outside itself — an auxiliary-loss
collector, a counter, a cache (:mod:`side_effects`): the recomputation would
change it again.
"""

from __future__ import annotations

import libcst as cst

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod
from bot.patching.codemods.side_effects import held_class, outside_mutations
from bot.patching.symbols import code_of

_CHECKPOINT = {"torch.utils.checkpoint.checkpoint"}


class CheckpointBlocks(PatchCodemod):
    NAME = "checkpoint_blocks"
    NEEDS = ("for ",)
    SUMMARY = ("for block in self.blocks: x = block(x) → "
               "x = checkpoint(block, x, use_reentrant=False) if self.training else block(x)")
    NOT_FOUND = "no `for block in self.<blocks>: x = block(x)` loop in a module method in the targets"

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        if not isinstance(original_node.target, cst.Name):
            return updated_node
        block = original_node.target.value
        iterable = E.strip(original_node.iter)
        if not _self_attribute(iterable):
            return updated_node
        statements = _body_statements(original_node.body)
        if statements is None or len(statements) != 1:
            self.decline(f"the loop over `{code_of(iterable)}` does more than `x = {block}(x)`")
            return updated_node
        assign = statements[0]
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1
                and isinstance(assign.value, cst.Call) and isinstance(assign.value.func, cst.Name)
                and assign.value.func.value == block):
            if any(self.is_call_to(n, _CHECKPOINT) for n in _calls(original_node.body)):
                self.decline(f"the loop over `{code_of(iterable)}` is already checkpointed")
            else:
                self.decline(f"the loop over `{code_of(iterable)}` does not have the form `x = {block}(x)`")
            return updated_node
        call = assign.value
        if E.has_star(call) or not call.args:
            self.decline(f"`{code_of(call)}` passes */** arguments or none at all")
            return updated_node
        if self.function is None or not _has_self(self.function):
            self.decline("the block loop is not in a method with `self` (needs self.training)")
            return updated_node
        unsafe = self._outside_mutations(iterable)
        if unsafe:
            self.decline(f"the blocks of `{code_of(iterable)}` change state outside themselves in their forward "
                         f"({unsafe[0]}{f'; and {len(unsafe) - 1} more' if len(unsafe) > 1 else ''}): checkpointing "
                         "would run that again in backward")
            return updated_node
        if not self.site_allowed(f"block loop over `{code_of(iterable)}`"):
            return updated_node
        checkpoint = cst.Call(func=self.ref("torch.utils.checkpoint.checkpoint"),
                              args=[cst.Arg(cst.Name(block)),
                                    *[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in call.args],
                                    E.kwarg("use_reentrant", cst.Name("False"))])
        guarded = cst.IfExp(test=E.expr("self.training"), body=checkpoint, orelse=call)
        self.mark_edited()
        return updated_node.with_changes(body=_replace_only(updated_node.body, assign.with_changes(value=guarded)))


    def _outside_mutations(self, iterable: cst.BaseExpression) -> list[str]:
        """What the forward of the blocks ``self.<attr>`` holds changes outside itself (side_effects.py); empty
        when the blocks' class is not defined in this file (nothing to read)."""
        owner = self.owner_class
        path = code_of(iterable).removeprefix("self.")
        if owner is None or path == code_of(iterable):
            return []
        block_class = held_class(self.module_node, owner.name.value, path)
        return outside_mutations(self.module_node, block_class) if block_class else []


def _self_attribute(node: cst.BaseExpression) -> bool:
    """``self.blocks`` or ``self.transformer.h``: a submodule list of this module."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name) and node.value == "self" and not isinstance(node, cst.Attribute)


def _has_self(function: cst.FunctionDef) -> bool:
    params = function.params.params
    return bool(params) and params[0].name.value == "self"


def _body_statements(body: cst.BaseSuite) -> list[cst.BaseSmallStatement] | None:
    """The small statements of a loop body that is only simple lines (no nested blocks, no else)."""
    if isinstance(body, cst.SimpleStatementSuite):
        return list(body.body)
    out: list[cst.BaseSmallStatement] = []
    for statement in body.body:  # type: ignore[attr-defined]
        if not isinstance(statement, cst.SimpleStatementLine):
            return None
        out.extend(statement.body)
    return out


def _replace_only(body: cst.BaseSuite, new: cst.BaseSmallStatement) -> cst.BaseSuite:
    if isinstance(body, cst.SimpleStatementSuite):
        return body.with_changes(body=[new])
    line = body.body[0]  # type: ignore[attr-defined]
    return body.with_changes(body=[line.with_changes(body=[new])])


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    found: list[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            found.append(n)

    node.visit(_Calls())
    return found
