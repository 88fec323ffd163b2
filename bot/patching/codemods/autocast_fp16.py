"""fp16 autocast with a dynamic loss scaler around an editable training step, on CUDA.

fp16 has the range of bf16's mantissa problem turned around: gradients
underflow, so fp16 training scales the loss up before backward and the
gradients back down before the update, skipping steps whose gradients
overflowed. That needs the backward and the optimizer step, not only the
forward, so this codemod applies only where the whole training step —
the model call, ``loss.backward()`` and ``optimizer.step()`` inside a loop of
the same function (or script) — is in the editable scope. It writes what
public trainers write (nanoGPT's ``train.py``, timm's ``NativeScaler``,
torchvision's classification reference)::

    scaler = torch.amp.GradScaler("cuda", enabled=next(model.parameters()).is_cuda)
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=scaler.is_enabled()):
            out = model(batch)
            loss = criterion(out, target)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)                 # only where gradients are clipped
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

The scaler is created once, before the outermost loop around the optimizer
step (a scaler made per step or per epoch would forget its scale). The device is taken from the code: the
file must put something on CUDA (a ``"cuda"`` device, ``.cuda()``,
``torch.cuda``), and at run time both the scaler and autocast are enabled only
where the model's parameters are on a CUDA device, so a CPU run computes what
it did before. Autocast runs reductions such as cross-entropy in fp32 on CUDA,
so the loss stays fp32. A step that already autocasts or scales, a step in a
function with no loop around it, several backward passes or several optimizer
steps are declined with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.codemod import SkipFile

from bot.patching.codemods import exprs as E
from bot.patching.codemods.autocast import AUTOCAST, is_loss_line, model_call
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import MODULE, code_of, covers

_OPTIMIZER = re.compile(r"^(self\.)?(opt|optim|optimizer|[a-z0-9_]*optimi[sz]er[a-z0-9_]*)$")
_CLIPS = {"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
          "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_"}
_SCALER = "scaler"
_STEP_NEEDS = "a GradScaler needs both the backward pass and the optimizer step in the editable code"

Loop = cst.For | cst.While


@dataclass(kw_only=True, slots=True)
class _Site:
    statement: cst.SimpleStatementLine
    loops: tuple[Loop, ...]


@dataclass(kw_only=True, slots=True)
class _Plan:
    """Original nodes of one unit (a function or the module's own statements) to rewrite."""

    loop: int = 0
    model_calls: set[int] = field(default_factory=set)
    backward: int = 0
    clip: int = 0
    step: int = 0
    optimizer: str = ""
    model: str = ""


class AutocastFp16Scaler(PatchCodemod):
    NAME = "autocast_fp16_scaler"
    SUMMARY = ('training step on CUDA → forward + loss under torch.autocast("cuda", dtype=torch.float16), '
               "scaler.scale(loss).backward(), scaler.step(optimizer), scaler.update() with a "
               'torch.amp.GradScaler("cuda") made once before the loop (GPU only)')
    NOT_FOUND = ("no training step (a model call, `loss.backward()` and `optimizer.step()`) in the targets; "
                 + _STEP_NEEDS)
    NEEDS = ("backward",)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self.start(tree)
        if not any(bound == "torch" or bound.startswith("torch.") for bound in self.bindings.values()):
            raise SkipFile(self.NO_TORCH)
        self._plans: dict[int, _Plan] = {}
        self._cuda = _mentions_cuda(tree)
        for qualified, unit in _units(tree):
            plan = self._plan_unit(qualified, unit)
            if plan is not None:
                self._plans[id(unit)] = plan
        if not self._plans:
            raise SkipFile(self.why_not())
        updated = tree.visit(self)
        if not self.edited:
            raise SkipFile(self.why_not())
        return updated

    # -- finding the step ----------------------------------------------------------------------

    def _plan_unit(self, qualified: str, unit: cst.Module | cst.FunctionDef) -> _Plan | None:
        sites = list(_sites(unit.body.body if isinstance(unit, cst.FunctionDef) else unit.body))
        backwards = [s for s in sites if _backward(s.statement) is not None]
        steps = [s for s in sites if self._optimizer_step(s.statement) is not None]
        if not backwards and not steps:
            return None
        say = lambda reason: self._decline_at(qualified, reason)  # noqa: E731
        if not backwards or not steps:
            say(f"has {'`.backward()`' if backwards else '`optimizer.step()`'} but no "
                f"{'`optimizer.step()`' if backwards else '`.backward()`'}; {_STEP_NEEDS}")
            return None
        if not self._allowed(qualified):
            say(f"training step found but outside the patch targets ({', '.join(sorted(self.scope or ()))}); "
                + _STEP_NEEDS)
            return None
        if len(backwards) > 1 or len(steps) > 1:
            say("several backward passes or optimizer steps; one scaler per step is not decided statically")
            return None
        if self._autocasts_or_scales(unit):
            say("the step already runs under torch.autocast or a GradScaler")
            return None
        if _SCALER in E.names_in(unit.body if isinstance(unit, cst.FunctionDef) else unit):
            say(f"the name `{_SCALER}` is already taken")
            return None
        if not self._cuda:
            say("the code never puts anything on CUDA (no \"cuda\" device, `.cuda()`, `torch.cuda` or "
                "`torch.accelerator`); "
                "fp16 with a GradScaler is a CUDA recipe, bf16 autocast is the one for CPUs")
            return None
        backward, step = backwards[0], steps[0]
        # The forward is wrapped in the innermost loop around both (the step loop); the scaler is made before
        # the outermost one, so that an epoch loop around the batches does not reset its scale.
        shared = [lp for lp in backward.loops if any(lp is s for s in step.loops)]
        loop = shared[-1] if shared else None
        if loop is None:
            say("the optimizer step is not inside a loop here; the GradScaler must outlive one step, and the "
                "loop that would hold it is elsewhere")
            return None
        order = {id(s.statement): i for i, s in enumerate(sites)}
        not_models = self._not_models()
        calls = [s for s in sites if order[id(s.statement)] < order[id(backward.statement)]
                 and any(lp is loop for lp in s.loops) and (call := model_call(s.statement)) is not None
                 and not (isinstance(call.func, cst.Name) and call.func.value in not_models)]
        if not calls:
            say("no model call (`out = model(x, ...)`) before `.backward()` in the step loop; fp16 autocast "
                "wraps the forward")
            return None
        clips = [s for s in sites if order[id(backward.statement)] < order[id(s.statement)]
                 < order[id(step.statement)] and self._clips(s.statement)]
        first_call = model_call(calls[0].statement)
        assert first_call is not None
        optimizer = self._optimizer_step(step.statement)
        assert optimizer is not None
        return _Plan(loop=id(shared[0]), model_calls={id(s.statement) for s in calls},
                     backward=id(backward.statement), clip=id(clips[0].statement) if clips else 0,
                     step=id(step.statement), optimizer=code_of(optimizer), model=code_of(first_call.func))

    def _optimizer_step(self, statement: cst.SimpleStatementLine) -> cst.BaseExpression | None:
        call = _expression_call(statement)
        if call is None or E.method_call(call, "step") is None or call.args:
            return None
        receiver = E.receiver(call)
        return receiver if _OPTIMIZER.match(code_of(receiver)) and "sched" not in code_of(receiver) else None

    def _clips(self, statement: cst.SimpleStatementLine) -> bool:
        found = False
        codemod = self

        class _Calls(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                nonlocal found
                found = found or codemod.is_call_to(call, _CLIPS)

        statement.visit(_Calls())
        return found

    def _autocasts_or_scales(self, unit: cst.CSTNode) -> bool:
        found = False
        codemod = self

        class _Look(cst.CSTVisitor):
            def visit_WithItem(self, node: cst.WithItem) -> None:
                nonlocal found
                item = E.strip(node.item)
                found = found or (isinstance(item, cst.Call) and codemod.is_call_to(item, AUTOCAST))

            def visit_Name(self, node: cst.Name) -> None:
                nonlocal found
                found = found or node.value == "GradScaler"

            def visit_Attribute(self, node: cst.Attribute) -> None:
                nonlocal found
                found = found or node.attr.value == "GradScaler"

        unit.visit(_Look())
        return found

    def _not_models(self) -> set[str]:
        names = set(self.bindings)
        names.update(s.name.value for s in self.module_node.body if isinstance(s, cst.FunctionDef | cst.ClassDef))
        return names

    def _allowed(self, qualified: str) -> bool:
        if self.scope is None:
            return True
        if qualified == MODULE:
            return MODULE in self.scope
        return any(covers(entry, qualified) for entry in self.scope)

    def _decline_at(self, where: str, reason: str) -> None:
        line = f"{where}: {reason}"
        if line not in self.declined:
            self.declined.append(line)

    # -- rewriting -----------------------------------------------------------------------------

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if id(original_node) in self._plans:
            self.mark_edited()
        return updated_node

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if id(original_node) in self._plans:
            self.mark_edited()
        return updated_node.with_changes(body=self._rewrite(original_node.body, updated_node.body))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated_node.with_changes(body=self._rewrite(original_node.body, updated_node.body))

    def _rewrite(self, originals: Sequence[cst.BaseStatement],
                 updated: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        i = 0
        while i < len(originals):
            orig, new = originals[i], updated[i]
            plan = next((p for p in self._plans.values()
                         if id(orig) in (p.loop, p.backward, p.clip, p.step) or id(orig) in p.model_calls), None)
            if plan is None:
                out.append(new)
                i += 1
                continue
            if id(orig) == plan.loop:
                make = _statement(f'{_SCALER} = GRADSCALER("cuda", enabled=next({plan.model}.parameters()).is_cuda)',
                                  GRADSCALER=self.ref("torch.amp.GradScaler"))
                out += [make.with_changes(leading_lines=new.leading_lines), new.with_changes(leading_lines=())]
            elif id(orig) in plan.model_calls:
                end = i + 1
                while end < len(originals) and is_loss_line(originals[end]):
                    end += 1
                out.append(self._autocast(list(updated[i:end])))
                i = end
                continue
            elif id(orig) == plan.backward:
                assert isinstance(new, cst.SimpleStatementLine)
                call = _expression_call(new)
                assert call is not None
                scaled = cst.Call(func=cst.Attribute(value=cst.Name(_SCALER), attr=cst.Name("scale")),
                                  args=[cst.Arg(E.strip(E.receiver(call)))])
                backward = call.with_changes(func=call.func.with_changes(value=scaled))  # type: ignore[union-attr]
                out.append(new.with_changes(body=[cst.Expr(backward)]))
            elif id(orig) == plan.clip:
                out += [_statement(f"{_SCALER}.unscale_({plan.optimizer})").with_changes(
                    leading_lines=new.leading_lines), new.with_changes(leading_lines=())]
            elif id(orig) == plan.step:
                assert isinstance(new, cst.SimpleStatementLine)
                out += [new.with_changes(body=[cst.Expr(E.expr(f"{_SCALER}.step({plan.optimizer})"))]),
                        _statement(f"{_SCALER}.update()")]
            i += 1
        return out

    def _autocast(self, statements: list[cst.BaseStatement]) -> cst.With:
        first = statements[0]
        call = cst.Call(func=self.ref("torch.autocast"), args=[
            cst.Arg(cst.SimpleString('"cuda"')),
            E.kwarg("dtype", self.ref("torch.float16")),
            E.kwarg("enabled", E.expr(f"{_SCALER}.is_enabled()")),
        ])
        inner = [first.with_changes(leading_lines=()), *statements[1:]]
        return cst.With(items=[cst.WithItem(item=call)], body=cst.IndentedBlock(body=inner),
                        leading_lines=first.leading_lines)


def _statement(code: str, **names: cst.BaseExpression) -> cst.SimpleStatementLine:
    """One statement from ``code``, each placeholder name in ``names`` replaced by its expression."""
    statement = cst.parse_statement(code)

    class _Swap(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            return names.get(updated.value, updated)

    result = statement.visit(_Swap())
    assert isinstance(result, cst.SimpleStatementLine)
    return result


def _expression_call(statement: cst.BaseStatement) -> cst.Call | None:
    """The call of a line that is exactly one call expression (``x.f(...)``)."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.Call):
        return statement.body[0].value
    return None


def _backward(statement: cst.SimpleStatementLine) -> cst.Call | None:
    """``<loss>.backward(...)``; a positional argument means a framework's ``backward(loss)``
    (``accelerator.backward(loss)``, ``fabric.backward(loss)``), whose scaling is the framework's."""
    call = _expression_call(statement)
    if call is None or E.method_call(call, "backward") is None or E.positional(call) or E.has_star(call):
        return None
    return call


def _units(tree: cst.Module) -> Iterator[tuple[str, cst.Module | cst.FunctionDef]]:
    """The module (its own statements) and every function, with qualified names."""
    yield MODULE, tree
    found: list[tuple[str, cst.FunctionDef]] = []

    class _Defs(cst.CSTVisitor):
        def __init__(self) -> None:
            self.names: list[str] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.names.append(node.name.value)
            found.append((".".join(self.names), node))

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            self.names.pop()

        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            self.names.append(node.name.value)

        def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
            self.names.pop()

    tree.visit(_Defs())
    yield from found


def _sites(body: Sequence[cst.BaseStatement], loops: tuple[Loop, ...] = ()) -> Iterator[_Site]:
    """Every simple statement line of a unit in source order, with the loops around it (not entering defs)."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield _Site(statement=statement, loops=loops)
        elif isinstance(statement, cst.FunctionDef | cst.ClassDef):
            continue
        elif isinstance(statement, cst.For | cst.While):
            yield from _sites(_block(statement.body), (*loops, statement))
            if statement.orelse is not None:
                yield from _sites(_block(statement.orelse.body), loops)
        elif isinstance(statement, cst.If):
            yield from _sites(_block(statement.body), loops)
            orelse = statement.orelse
            while orelse is not None:
                yield from _sites(_block(orelse.body), loops)
                orelse = orelse.orelse if isinstance(orelse, cst.If) else None
        elif isinstance(statement, cst.With):
            yield from _sites(_block(statement.body), loops)
        elif isinstance(statement, cst.Try):
            yield from _sites(_block(statement.body), loops)
            for handler in statement.handlers:
                yield from _sites(_block(handler.body), loops)
            for extra in (statement.orelse, statement.finalbody):
                if extra is not None:
                    yield from _sites(_block(extra.body), loops)


def _block(suite: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    return suite.body if isinstance(suite, cst.IndentedBlock) else ()


def _mentions_cuda(tree: cst.Module) -> bool:
    """Whether the code may put things on CUDA: a "cuda..." string, ``.cuda()``, ``torch.cuda``, or the
    device-agnostic ``torch.accelerator`` (``current_accelerator()`` is CUDA on an NVIDIA machine; the
    pytorch/examples jobs are written that way)."""
    found = False

    class _Look(cst.CSTVisitor):
        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            nonlocal found
            found = found or "cuda" in node.value

        def visit_Attribute(self, node: cst.Attribute) -> None:
            nonlocal found
            found = found or node.attr.value == "cuda" or (
                node.attr.value == "accelerator" and isinstance(node.value, cst.Name) and node.value.value == "torch")

    tree.visit(_Look())
    return found


__all__ = ["AutocastFp16Scaler"]
