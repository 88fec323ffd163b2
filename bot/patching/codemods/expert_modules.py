"""Experts held as a list of modules, read as stacked weights: what lets the grouped-experts rewrite batch them.

Public MoE code often keeps its experts as ``nn.ModuleList([Expert(...) for _ in
range(E)])`` and calls each one in the dispatch loop (``expert(x[tok])``). A
batched matmul needs the experts' weights stacked: when the expert's class is
defined in the same file and its ``forward`` is one ``return`` of linear layers
and elementwise activations (``self.proj(F.gelu(self.fc(x)))``, a SwiGLU), the
call is inlined with per-expert weights ``_grp_<layer>_w[e]`` (``(in, out)``:
``x @ W[e]``) and biases ``_grp_<layer>_b[e]``, stacked from the modules before
the loop — ``torch.stack`` keeps each expert's parameter in the graph, so the
gradients reach the modules' own weights. Anything else in the expert (a norm, a
dropout, a submodule of another class, several statements) is declined with the
reason: it is not row-wise, or not read here.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from bot.patching.codemods.side_effects import held_class
from bot.patching.symbols import code_of

#: Activation modules and the function each one computes.
ACTIVATIONS = {"GELU": "torch.nn.functional.gelu", "ReLU": "torch.nn.functional.relu",
               "SiLU": "torch.nn.functional.silu", "Tanh": "torch.tanh", "Sigmoid": "torch.sigmoid"}
_P = "_grp_"


@dataclass(frozen=True, kw_only=True, slots=True)
class ExpertForm:
    """An expert class read for inlining: its forward's parameter and expression, its linear layers (with or
    without bias) and its activation modules (attribute → the function)."""

    cls: str
    param: str
    body: cst.BaseExpression
    linears: dict[str, bool]  # attribute -> has a bias
    activations: dict[str, str]


def _callee(call: cst.Call) -> str:
    func = call.func
    return func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""


def _methods(node: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    return {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}


def read_expert(module: cst.Module, owner: str, container: str) -> ExpertForm | str:
    """The expert class ``self.<container>`` of ``owner`` holds, read for inlining, or why it cannot be."""
    cls = held_class(module, owner, container)
    node = next((s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == cls), None)
    if cls is None or node is None:
        return f"the experts `self.{container}` are not built from a class defined in this file"
    methods = _methods(node)
    forward, init = methods.get("forward"), methods.get("__init__")
    if forward is None or init is None or len(forward.params.params) != 2:
        return f"{cls} has no `forward(self, x)` and `__init__` to read"
    statements = forward.body.body if isinstance(forward.body, cst.IndentedBlock) else ()
    if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine) \
            or not isinstance(statements[0].body[0], cst.Return) or statements[0].body[0].value is None:
        return f"{cls}.forward is not a single `return` expression"
    linears: dict[str, bool] = {}
    activations: dict[str, str] = {}
    for line in init.body.body if isinstance(init.body, cst.IndentedBlock) else ():
        for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Attribute) and isinstance(small.value, cst.Call)):
                continue
            attr, built = small.targets[0].target.attr.value, _callee(small.value)
            if built == "Linear":
                bias = next((a.value for a in small.value.args if a.keyword and a.keyword.value == "bias"), None)
                linears[attr] = not (isinstance(bias, cst.Name) and bias.value == "False")
            elif built in ACTIVATIONS and not small.value.args:
                activations[attr] = ACTIVATIONS[built]
    return ExpertForm(cls=cls, param=forward.params.params[1].name.value, body=statements[0].body[0].value,
                      linears=linears, activations=activations)


class _Inline(cst.CSTTransformer):
    """The expert's forward expression for expert ``e`` on ``arg``: ``self.fc(z)`` → ``(z) @ _grp_fc_w[e] +
    _grp_fc_b[e]``, ``self.act(z)`` → ``F.gelu(z)``; any other ``self`` reach is an error."""

    def __init__(self, form: ExpertForm, arg: cst.BaseExpression, index: str, refs: dict[str, str]) -> None:
        super().__init__()
        self.form, self.arg, self.index, self.refs = form, arg, index, refs
        self.unknown: list[str] = []

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
            return updated_node
        attr = func.attr.value
        if len(updated_node.args) != 1 or updated_node.args[0].keyword is not None:
            self.unknown.append(code_of(original_node))
            return updated_node
        inner = updated_node.args[0].value
        if attr in self.form.linears:
            text = f"({code_of(inner)}) @ {_P}{attr}_w[{self.index}]"
            if self.form.linears[attr]:
                text += f" + {_P}{attr}_b[{self.index}]"
            return cst.parse_expression(f"({text})")
        if attr in self.form.activations:
            return cst.parse_expression(f"{self.refs[self.form.activations[attr]]}({code_of(inner)})")
        self.unknown.append(code_of(original_node))
        return updated_node

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.arg if original_node.value == self.form.param else updated_node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if isinstance(original_node.value, cst.Name) and original_node.value.value == "self" \
                and original_node.attr.value not in self.form.linears \
                and original_node.attr.value not in self.form.activations:
            self.unknown.append(code_of(original_node))
        return updated_node


def inline_call(form: ExpertForm, arg: cst.BaseExpression, index: str,
                refs: dict[str, str]) -> cst.BaseExpression | str:
    """The expert's forward on ``arg`` with expert ``index``'s stacked weights, or why it cannot be inlined
    (``refs``: how this file spells each activation function)."""
    inliner = _Inline(form, arg, index, refs)
    out = form.body.visit(inliner)
    if inliner.unknown:
        return (f"{form.cls}.forward uses `{inliner.unknown[0]}`, which is neither a linear layer nor an "
                "activation (not row-wise, or not read here)")
    return out  # type: ignore[return-value]


def stack_lines(form: ExpertForm, container: str, used: set[str]) -> list[str]:
    """The statements that stack each used linear layer's weight (as ``(in, out)``) and bias over the experts."""
    lines = []
    for attr, bias in form.linears.items():
        if attr not in used:
            continue
        lines.append(f"{_P}{attr}_w = torch.stack([m.{attr}.weight for m in self.{container}]).transpose(1, 2)")
        if bias:
            lines.append(f"{_P}{attr}_b = torch.stack([m.{attr}.bias for m in self.{container}])")
    return lines
