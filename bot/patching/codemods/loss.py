"""Unfused next-token loss → ``F.cross_entropy`` (a memory saver).

Two shapes of the same computation are rewritten, following single-use locals
within one block (so the three-line form ``logp = log_softmax(logits.float());
tlp = gather(logp, -1, targets.unsqueeze(-1)).squeeze(-1); return -tlp.mean()``
is one site):

- ``-(log_softmax(x, -1).gather(-1, t.unsqueeze(-1))).mean()`` (or ``.sum()``)
  → ``F.cross_entropy(x.flatten(0, -2), t.flatten())`` (``reduction="sum"``);
- ``F.nll_loss(F.log_softmax(x, dim=-1).view(-1, V), t, ...)``
  → ``F.cross_entropy(x.view(-1, V), t, ...)`` (every other argument kept);

and an explicit ``.float()`` upcast of the logits inside ``F.cross_entropy(...)``
is dropped. Dropping the upcast avoids a full fp32 copy of the logits; under
autocast the loss ops already run in fp32, outside it a half-precision
``cross_entropy`` accumulates in fp32 but returns a half-precision loss, so the
loss curve check decides whether that is close enough.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

_LOG_SOFTMAX = {"torch.log_softmax", "torch.nn.functional.log_softmax", "torch.special.log_softmax"}
_GATHER = {"torch.gather"}
_NLL = {"torch.nn.functional.nll_loss"}
_CROSS_ENTROPY = {"torch.nn.functional.cross_entropy"}
_MEAN = {"torch.mean"}
_SUM = {"torch.sum"}
_CHAIN = {"view", "reshape", "flatten", "contiguous"}


@dataclass(frozen=True, kw_only=True, slots=True)
class _Rewrite:
    value: cst.BaseExpression
    consumed: frozenset[int]  # indices of the single-use assignments folded into the site


class UnfusedLossToCrossEntropy(PatchCodemod):
    NAME = "fused_cross_entropy"
    NEEDS = ("log_softmax", "cross_entropy")
    SUMMARY = ("unfused loss (log_softmax then gather/nll_loss, or .float() logits inside cross_entropy) "
               "→ F.cross_entropy")
    NOT_FOUND = ("no unfused loss (log_softmax followed by gather or nll_loss, or `.float()` logits "
                 "passed to cross_entropy) in the targets")

    # -- .float() inside cross_entropy ------------------------------------------

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not self.is_call_to(original_node, _CROSS_ENTROPY) or not updated_node.args:
            return updated_node
        first = updated_node.args[0]
        if first.keyword is not None and first.keyword.value != "input":
            return updated_node
        without = _drop_float(first.value)
        if without is None or not self.site_allowed("`.float()` logits in cross_entropy"):
            return updated_node
        self.mark_edited()
        return updated_node.with_changes(args=[first.with_changes(value=without), *updated_node.args[1:]])

    # -- log_softmax + gather / nll_loss ----------------------------------------

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        function = self.function
        if function is None:
            return updated_node
        originals = original_node.body
        rewrites: dict[int, _Rewrite] = {}
        for index, statement in enumerate(originals):
            value = _site_value(statement)
            if value is None:
                continue
            found = self._rewrite(originals, index, value, function)
            if isinstance(found, str):
                self.decline(found)
            elif found is not None and self.site_allowed("unfused log_softmax loss"):
                rewrites[index] = found
        if not rewrites:
            return updated_node
        consumed = set().union(*(r.consumed for r in rewrites.values()))
        body: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []
        for index, statement in enumerate(updated_node.body):
            if index in consumed:
                carried.extend(statement.leading_lines)  # keep comments above removed lines
                continue
            if index in rewrites:
                statement = _with_site_value(statement, rewrites[index].value)
            if carried:
                statement = statement.with_changes(leading_lines=[*carried, *statement.leading_lines])
                carried = []
            body.append(statement)
        self.mark_edited()
        return updated_node.with_changes(body=body)

    def _rewrite(self, body: tuple[cst.BaseStatement, ...], index: int, value: cst.BaseExpression,
                 function: cst.FunctionDef) -> _Rewrite | str | None:
        used: set[int] = set()

        def resolve(node: cst.BaseExpression) -> cst.BaseExpression:
            node = E.strip(node)
            if isinstance(node, cst.Name):
                for j in range(index - 1, -1, -1):
                    if node.value in E.assigned_names(body[j]):
                        found = E.name_assign(body[j])
                        if found is not None and found[0] == node.value:
                            used.add(j)
                            return E.strip(found[1])
                        return node
            return node

        # The site itself is not followed through a bare name: `return loss` after
        # `loss = F.nll_loss(...)` is rewritten at the assignment, not folded into the return.
        negated, reduction, core = False, None, E.strip(value)
        for _ in range(4):
            if isinstance(core, cst.UnaryOperation) and isinstance(core.operator, cst.Minus):
                negated, core = not negated, resolve(core.expression)
            elif E.method_call(core, "neg") is not None and not core.args:  # type: ignore[union-attr]
                negated, core = not negated, resolve(E.receiver(core))  # type: ignore[arg-type]
            elif reduction is None and self._reduction(core) is not None:
                reduction, inner = self._reduction(core)  # type: ignore[misc]
                core = resolve(inner)
            else:
                break

        if negated and reduction is not None:
            gathered = self._gathered(core, resolve)
            if gathered is None:
                return None
            logits, targets = gathered
            args = [cst.Arg(_suffix(logits, ".flatten(0, -2)")), cst.Arg(_suffix(targets, ".flatten()"))]
            if reduction == "sum":
                args.append(E.kwarg("reduction", cst.SimpleString('"sum"')))
            call = cst.Call(func=cst.Name("cross_entropy"), args=args)
            inputs = (logits, targets)
        elif not negated and reduction is None and self.is_call_to(core, _NLL):
            found = self._nll(core, resolve, body, index)  # type: ignore[arg-type]
            if found is None or isinstance(found, str):
                return found
            call, inputs = found
        else:
            return None

        # Folding a local into the site is only right if nothing else reads it,
        # and if the names the inputs read are not rebound on the way.
        site_lines = used | {index}
        for j in sorted(used):
            found = E.name_assign(body[j])
            assert found is not None
            name = found[0]
            inside = sum(E.count_name(body[k], name) for k in site_lines)
            if E.count_name(function.body, name) != inside or name in E.names_in(call):
                return f"`{name}` is used elsewhere as well, so its line cannot be folded into the loss"
        read = set().union(*(E.names_in(x) for x in inputs))
        first = min(used) if used else index
        for j in range(first + 1, index):
            if j not in used and E.assigned_names(body[j]) & read:
                rebound = sorted(E.assigned_names(body[j]) & read)
                return f"`{rebound[0]}` is reassigned between the log_softmax and the loss"
        return _Rewrite(value=call.with_changes(func=self.ref("torch.nn.functional.cross_entropy")),
                        consumed=frozenset(used))

    def _reduction(self, node: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
        for name, functions in (("mean", _MEAN), ("sum", _SUM)):
            method = E.method_call(node, name)
            if method is not None and not method.args and not self.qualnames(method.func) & functions:
                return name, E.receiver(method)
            if self.is_call_to(node, functions) and len(node.args) == 1:  # type: ignore[attr-defined]
                return name, node.args[0].value  # type: ignore[attr-defined]
        return None

    def _gathered(self, node: cst.BaseExpression, resolve) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
        """(logits, targets) for ``log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1))[.squeeze(-1)]``."""
        squeeze = E.method_call(node, "squeeze")
        if squeeze is not None and len(squeeze.args) == 1 and E.literal_int(squeeze.args[0].value) == -1:
            node = resolve(E.receiver(squeeze))
        if not isinstance(node, cst.Call):
            return None
        if self.is_call_to(node, _GATHER):
            source, dim, index = E.argument(node, 0, "input"), E.argument(node, 1, "dim"), E.argument(node, 2, "index")
        elif E.method_call(node, "gather") is not None:
            source, dim, index = E.receiver(node), E.argument(node, 0, "dim"), E.argument(node, 1, "index")
        else:
            return None
        if source is None or index is None or E.literal_int(dim) != -1:
            return None
        targets = _unsqueezed_last(index)
        logits = self._log_softmax(resolve(source), -1)
        if targets is None or logits is None:
            return None
        return logits, targets

    def _nll(self, call: cst.Call, resolve, body, index: int) -> tuple[cst.Call, tuple[cst.BaseExpression, ...]] | str | None:
        source = E.argument(call, 0, "input")
        if source is None:
            return None
        node = resolve(source)
        view = E.method_call(node, "view", "reshape")
        rebuilt: cst.BaseExpression
        if view is not None and len(view.args) == 2:
            logits = self._log_softmax(resolve(E.receiver(view)), -1)
            if logits is None:
                return None
            rebuilt = view.with_changes(func=view.func.with_changes(value=_atom(logits)))  # type: ignore[attr-defined]
            folded = E.strip(E.receiver(view))
            if isinstance(folded, cst.Name) and E.is_pure(logits):
                # logp.view(-1, logp.size(-1)): log_softmax keeps the shape, so logp's sizes are the logits'
                rebuilt = rebuilt.visit(_Substitute(folded.value, logits))  # type: ignore[assignment]
        else:
            logits = self._log_softmax(node, 1)
            if logits is None:
                logits = self._log_softmax(node, -1)
                if logits is None:
                    return None
                if not _is_2d(logits, body, index):
                    return (f"cannot tell that `{code_of(logits)}` is 2-D, so log_softmax(dim=-1) "
                            "and nll_loss's class dimension (1) may differ")
            rebuilt = logits
        first = call.args[0]
        args = [first.with_changes(value=rebuilt), *call.args[1:]]
        inputs = (logits, *(a.value for a in call.args[1:]))
        return cst.Call(func=cst.Name("cross_entropy"), args=args), inputs

    def _log_softmax(self, node: cst.BaseExpression, dim: int) -> cst.BaseExpression | None:
        """The (upcast-free) logits of ``log_softmax(logits, dim)``, or None."""
        node = E.strip(node)
        if not isinstance(node, cst.Call):
            return None
        if self.is_call_to(node, _LOG_SOFTMAX):
            source, given = E.argument(node, 0, "input"), E.argument(node, 1, "dim")
        elif E.method_call(node, "log_softmax") is not None:
            source, given = E.receiver(node), E.argument(node, 0, "dim")
        else:
            return None
        if source is None or E.literal_int(given) != dim or E.keyword(node, "dtype") is not None:
            return None
        without = _drop_float(source)
        return E.strip(without if without is not None else source)


def _site_value(statement: cst.BaseStatement) -> cst.BaseExpression | None:
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Return) and small.value is not None:
        return small.value
    if isinstance(small, cst.Assign | cst.AugAssign) or (isinstance(small, cst.AnnAssign) and small.value):
        return small.value  # type: ignore[return-value]
    return None


def _with_site_value(statement: cst.BaseStatement, value: cst.BaseExpression) -> cst.BaseStatement:
    assert isinstance(statement, cst.SimpleStatementLine)
    small = statement.body[0]
    return statement.with_changes(body=[small.with_changes(value=value)])


def _drop_float(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``node`` without a ``.float()`` in its method chain (``x.float().view(-1, V)`` → ``x.view(-1, V)``);
    None when there is none."""
    node = E.strip(node)
    upcast = E.method_call(node, "float")
    if upcast is not None and not upcast.args:
        inner = E.receiver(upcast)
        return _drop_float(inner) or inner
    upcast = E.method_call(node, "to")
    if upcast is not None and len(upcast.args) == 1 and code_of(upcast.args[0].value) in (
            "torch.float32", "torch.float"):
        inner = E.receiver(upcast)
        return _drop_float(inner) or inner
    link = E.method_call(node, *_CHAIN)
    if link is not None:
        inner = _drop_float(E.receiver(link))
        if inner is not None:
            return link.with_changes(func=link.func.with_changes(value=_atom(inner)))  # type: ignore[attr-defined]
    return None


def _unsqueezed_last(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``t`` for ``t.unsqueeze(-1)`` or ``t[..., None]``."""
    node = E.strip(node)
    unsqueeze = E.method_call(node, "unsqueeze")
    if unsqueeze is not None and len(unsqueeze.args) == 1 and E.literal_int(unsqueeze.args[0].value) == -1:
        return E.receiver(unsqueeze)
    if (isinstance(node, cst.Subscript) and len(node.slice) == 2
            and all(isinstance(s.slice, cst.Index) for s in node.slice)
            and [code_of(s.slice.value) for s in node.slice] == ["...", "None"]):  # type: ignore[union-attr]
        return node.value
    return None


def _is_2d(logits: cst.BaseExpression, body: tuple[cst.BaseStatement, ...], index: int) -> bool:
    """Whether ``logits`` is a local last bound (in this block) to a two-argument view/reshape."""
    if not isinstance(logits, cst.Name):
        return False
    for j in range(index - 1, -1, -1):
        if logits.value in E.assigned_names(body[j]):
            found = E.name_assign(body[j])
            view = E.method_call(found[1], "view", "reshape") if found else None
            return view is not None and len(view.args) == 2
    return False


class _Substitute(cst.CSTTransformer):
    """Replace the variable ``name`` (not attributes or keywords spelled the same) with ``value``."""

    def __init__(self, name: str, value: cst.BaseExpression) -> None:
        self.name = name
        self.value = value

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)  # `.size` is not the variable `size`

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.value if original_node.value == self.name else updated_node


def _atom(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` parenthesised if it would bind looser than an attribute access."""
    node = E.strip(node)
    if isinstance(node, cst.Name | cst.Attribute | cst.Call | cst.Subscript):
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _suffix(node: cst.BaseExpression, suffix: str) -> cst.BaseExpression:
    return cst.parse_expression(code_of(_atom(node)) + suffix)
