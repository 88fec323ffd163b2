"""Optimizer implementation switches: ``foreach=True``, ``fused=True``, ``zero_grad(set_to_none=True)``.

These change how the update is computed, not what it is: the multi-tensor
(``foreach``) and fused kernels implement the same algorithm. ``foreach`` and
``fused`` cannot both be True (torch raises), so each codemod declines a call
where the other is on. A call that passes ``**kwargs`` is only edited when the
mapping is a literal in the same function that provably does not set the flag.

On CUDA, torch already picks ``foreach`` when the flag is left at its default
(None), and ``set_to_none`` has defaulted to True since torch 2.0: the useful
cases are an explicit ``foreach=False`` / ``set_to_none=False`` (flipped) and
CPU training. The patch's Effect prior should say so.
"""

from __future__ import annotations

import libcst as cst

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

_FOREACH_OPTIMIZERS = {
    f"torch.optim.{name}" for name in
    ("Adam", "AdamW", "SGD", "RMSprop", "NAdam", "RAdam", "Adagrad", "Adamax", "ASGD", "Adadelta")
} | {"torch.optim.adam.Adam", "torch.optim.adamw.AdamW", "torch.optim.sgd.SGD"}
_FUSED_OPTIMIZERS = {"torch.optim.Adam", "torch.optim.AdamW", "torch.optim.SGD",
                     "torch.optim.adam.Adam", "torch.optim.adamw.AdamW", "torch.optim.sgd.SGD"}


class _OptimizerFlag(PatchCodemod):
    NEEDS = ("optim",)
    FLAG = ""
    OTHER = ""
    OPTIMIZERS: frozenset[str] = frozenset()

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not self.is_call_to(original_node, self.OPTIMIZERS):
            return updated_node
        what = f"`{code_of(original_node.func)}(...)`"
        flag, other = E.keyword(original_node, self.FLAG), E.keyword(original_node, self.OTHER)
        if flag is not None and E.literal_bool(flag.value) is True:
            self.decline(f"{what} already has {self.FLAG}=True")
            return updated_node
        if flag is not None and E.literal_bool(flag.value) is None:
            self.decline(f"{what} sets {self.FLAG} from an expression ({code_of(flag.value)}); left to the launch knobs")
            return updated_node
        if other is not None and E.literal_bool(other.value) is not False:
            self.decline(f"{what} sets {self.OTHER}={code_of(other.value)}; {self.FLAG} and {self.OTHER} "
                         "cannot both be True")
            return updated_node
        if E.has_star(original_node) and (flag is None or other is None):
            unknown = self._star_keys(original_node)
            if unknown is None:
                self.decline(f"{what} passes **mapping that may set {self.FLAG}/{self.OTHER}")
                return updated_node
            if self.FLAG in unknown or (self.OTHER in unknown and other is None):
                self.decline(f"{what} passes {self.FLAG} or {self.OTHER} through **mapping")
                return updated_node
        if not self.site_allowed(what):
            return updated_node
        self.mark_edited()
        if flag is not None:  # explicit False: flip it
            return E.set_arg_value(updated_node, self.FLAG, cst.Name("True"))
        return E.insert_arg(updated_node, E.kwarg(self.FLAG, cst.Name("True")))

    def _star_keys(self, call: cst.Call) -> set[str] | None:
        """Keys of every ``**mapping`` when each is a dict literal (or ``dict(...)``) bound once
        in this function; None when any is not."""
        function = self.function
        keys: set[str] = set()
        for arg in call.args:
            if arg.star == "*":
                continue
            if arg.star != "**":
                continue
            value = E.strip(arg.value)
            if isinstance(value, cst.Name) and function is not None:
                bound = [v for s in E.statements_in(function.body) if isinstance(s, cst.Assign)
                         for t in s.targets if code_of(t.target) == value.value for v in (s.value,)]
                if len(bound) != 1 or value.value in _augmented(function):
                    return None
                value = E.strip(bound[0])
            found = _literal_keys(value)
            if found is None:
                return None
            keys |= found
        return keys


def _augmented(function: cst.FunctionDef) -> set[str]:
    """Names whose mapping may be changed after it is built (``kw[...] = ``, ``kw.update``)."""
    out: set[str] = set()
    for small in E.statements_in(function.body):
        if isinstance(small, cst.Assign):
            for t in small.targets:
                if isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name):
                    out.add(t.target.value.value)
        if isinstance(small, cst.Expr):
            call = E.method_call(small.value, "update", "setdefault", "__setitem__")
            if call is not None and isinstance(E.receiver(call), cst.Name):
                out.add(E.receiver(call).value)  # type: ignore[attr-defined]
    return out


def _literal_keys(node: cst.BaseExpression) -> set[str] | None:
    if isinstance(node, cst.Dict):
        keys: set[str] = set()
        for element in node.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            keys.add(str(element.key.evaluated_value))
        return keys
    if isinstance(node, cst.Call) and code_of(node.func) == "dict" and not E.has_star(node) \
            and not E.positional(node):
        return {a.keyword.value for a in node.args if a.keyword is not None}
    return None


class OptimizerForeach(_OptimizerFlag):
    NAME = "optimizer_foreach"
    SUMMARY = "torch.optim.{AdamW,Adam,SGD,...}(...) → foreach=True (multi-tensor update), flipping foreach=False"
    NOT_FOUND = "no torch.optim optimizer constructor (Adam, AdamW, SGD, ...) in the targets"
    FLAG, OTHER = "foreach", "fused"
    OPTIMIZERS = frozenset(_FOREACH_OPTIMIZERS)


class OptimizerFused(_OptimizerFlag):
    NAME = "optimizer_fused"
    SUMMARY = "torch.optim.{AdamW,Adam,SGD}(...) → fused=True (single fused kernel per step)"
    NOT_FOUND = "no torch.optim.Adam/AdamW/SGD constructor in the targets"
    FLAG, OTHER = "fused", "foreach"
    OPTIMIZERS = frozenset(_FUSED_OPTIMIZERS)


class ZeroGradSetToNone(PatchCodemod):
    NAME = "zero_grad_set_to_none"
    NEEDS = ("zero_grad",)
    SUMMARY = "x.zero_grad() → x.zero_grad(set_to_none=True) (frees gradients instead of zero-filling)"
    NOT_FOUND = "no `.zero_grad()` call in the targets"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if E.method_call(original_node, "zero_grad") is None:
            return updated_node
        what = f"`{code_of(original_node.func)}()`"
        given = E.argument(original_node, 0, "set_to_none")
        if given is not None and E.literal_bool(given) is True:
            self.decline(f"{what} already passes set_to_none=True")
            return updated_node
        if given is not None and E.literal_bool(given) is None:
            self.decline(f"{what} passes set_to_none={code_of(given)}, an expression")
            return updated_node
        if E.has_star(original_node) or len(original_node.args) > 1:
            self.decline(f"{what} has arguments this codemod does not understand")
            return updated_node
        if not self.site_allowed(what):
            return updated_node
        self.mark_edited()
        return updated_node.with_changes(args=[E.kwarg("set_to_none", cst.Name("True"))])
