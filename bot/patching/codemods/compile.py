"""``torch.compile`` the model where it is built.

After ``model = GPT(config)`` (or ``model = build_model(args).to(device)``)
this inserts ``model.compile()``: ``nn.Module.compile`` compiles the forward in
place, so unlike ``model = torch.compile(model)`` the object keeps its class,
its attributes and its ``state_dict`` keys (no ``_orig_mod.`` prefix), and
checkpoints written by the patched job still load into the unpatched one.
Only construction counts: a class call, a model builder or a call into a registry of
architectures (``models.__dict__[args.arch]()``), possibly followed
by ``.to(...)``/``.cuda()``/``.train()``; ``model = copy.deepcopy(other)`` does not.
A file that already calls ``torch.compile`` anywhere (even behind a flag, even
in a builder whose result is assigned here) is left to the launch knobs, since
the model might reach the new line compiled already.
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.codemod import SkipFile

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod

_COMPILE = {"torch.compile"}
_SETUP = ("to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double", "requires_grad_", "type")
_LOADERS = {"from_pretrained", "from_config"}
# `model`, `net`, `raw_model`, `student_net`; not `model_state_dict` or `model_config`.
_MODEL_NAME = re.compile(r"^(model|net|network|[a-z0-9_]+_(model|net))$")


class CompileModel(PatchCodemod):
    NAME = "torch_compile_model"
    SUMMARY = "model = Model(...) → followed by model.compile() (torch.compile in place)"
    NOT_FOUND = "no `model = <constructor>(...)` assignment in the targets"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self.start(tree)
        if self._already_compiled(tree):
            raise SkipFile("this file already calls torch.compile / .compile() (possibly behind a flag); "
                           "compiling again could compile twice, so that is left to the launch knobs")
        return super().transform_module_impl(tree)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        if self.in_class_body:
            return updated_node
        if self._nodes and isinstance(self._nodes[-1], cst.FunctionDef) and _registered(self._nodes[-1]):
            # timm/DeiT `@register_model` factories: dozens of them, one runs; the entry point's
            # `model = create_model(...)` is where the model that trains is built
            self.decline(f"`{self._nodes[-1].name.value}` is a registered model factory; compiled where the "
                         "entry point builds the model")
            return updated_node
        return self._insert(original_node, updated_node)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return self._insert(original_node, updated_node)

    def _insert(self, original: cst.IndentedBlock | cst.Module,
                updated: cst.IndentedBlock | cst.Module) -> cst.IndentedBlock | cst.Module:
        originals = original.body
        body = list(updated.body)
        out: list[cst.BaseStatement] = []
        for i, statement in enumerate(originals):
            out.append(body[i])
            name = self._built_model(statement)
            if name is None:
                continue
            if not self.site_allowed(f"`{name} = ...` construction"):
                continue
            out.append(cst.SimpleStatementLine(body=[cst.Expr(E.expr(f"{name}.compile()"))]))
            self.mark_edited()
        return updated.with_changes(body=out) if out != body else updated

    def _built_model(self, statement: cst.BaseStatement) -> str | None:
        found = E.name_assign(statement)
        if found is None or not _MODEL_NAME.match(found[0]):
            return None
        name, value = found
        value = E.strip(value)
        if not isinstance(value, cst.Call) or name in E.names_in(value):
            return None  # `model = model.to(device)` is not where the model is built
        core: cst.BaseExpression = value
        while (setup := E.method_call(core, *_SETUP)) is not None:
            core = E.strip(E.receiver(setup))  # GPT(config).to(device).train()
        if not isinstance(core, cst.Call) or self.is_call_to(core, _COMPILE):
            return None
        func = core.func
        if isinstance(func, cst.Subscript):
            # a registry of architectures: `models.__dict__[args.arch]()` (pytorch/examples' imagenet),
            # `MODELS[name](...)`
            registry = self.module_node.code_for_node(func.value).lower()
            return name if re.search(r"model|arch|net", registry) else None
        last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        # A class (`GPT(config)`, `nn.Sequential(...)`) or a model builder (`build_model(args)`,
        # `AutoModel.from_pretrained(...)`); not `copy.deepcopy(model)` or `symbolic_trace(model)`.
        if last[:1].isupper() or "model" in last.lower() or last in _LOADERS:
            return name
        return None

    def _already_compiled(self, module: cst.Module) -> bool:
        """Any ``torch.compile(...)`` or ``<x>.compile()`` in the file: the model may reach this
        line compiled already (``build_model`` may return ``torch.compile(model)``)."""
        found = False
        codemod = self

        class _Compiles(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                nonlocal found
                if codemod.is_call_to(node, _COMPILE) or (E.method_call(node, "compile") is not None
                                                          and not node.args):
                    found = True

        module.visit(_Compiles())
        return found


def _registered(function: cst.FunctionDef) -> bool:
    """Decorated by a registry (`@register_model`, `@MODELS.register_module()`)."""
    for decorator in function.decorators:
        node = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
        name = node.attr.value if isinstance(node, cst.Attribute) else node.value if isinstance(node, cst.Name) else ""
        if "register" in name:
            return True
    return False
