"""The base every codemod shares, on a tiny codemod: its scope, its reasons for declining, calls recognised
however they were imported, and names spelled through the file's imports (an import added only as a last resort)."""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext, TransformSkip, TransformSuccess, transform_module

from bot.patching.codemods.base import PatchCodemod


class _Sigmoid(PatchCodemod):
    """``torch.sigmoid(x)`` -> ``torch.nn.functional.sigmoid(x)``, as the file can spell it."""

    NAME = "test_sigmoid"
    SUMMARY = "a test codemod"
    NOT_FOUND = "no torch.sigmoid call"
    NEEDS = ("sigmoid",)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not self.is_call_to(original_node, {"torch.sigmoid"}):
            return updated_node
        if not self.site_allowed("torch.sigmoid"):
            return updated_node
        self.mark_edited()
        return updated_node.with_changes(func=self.ref("torch.nn.functional.sigmoid"))


def _run(source: str, scope: list[str] | None = None) -> tuple[object, _Sigmoid]:
    codemod = _Sigmoid(CodemodContext(), scope=scope)
    return transform_module(codemod, source), codemod


def test_a_call_is_rewritten_through_an_existing_import() -> None:
    result, codemod = _run("import torch\nimport torch.nn.functional as F\n\ndef f(x):\n    return torch.sigmoid(x)\n")
    assert isinstance(result, TransformSuccess)
    assert "return F.sigmoid(x)" in result.code and codemod.imports_added == [] and codemod.edited == ["f"]


def test_an_aliased_import_is_recognised_and_a_missing_import_is_added_and_reported() -> None:
    result, codemod = _run("from torch import sigmoid as sg\n\nclass M:\n    def forward(self, x):\n"
                           "        return sg(x)\n")
    assert isinstance(result, TransformSuccess)
    assert "import torch\n" in result.code and "torch.nn.functional.sigmoid(x)" in result.code
    assert codemod.imports_added == ["import torch"] and codemod.edited == ["M.forward"]


def test_a_site_outside_the_scope_is_left_and_the_reason_given() -> None:
    source = "import torch\n\ndef f(x):\n    return torch.sigmoid(x)\n\ndef g(x):\n    return torch.sigmoid(x)\n"
    result, codemod = _run(source, scope=["g"])
    assert isinstance(result, TransformSuccess) and codemod.edited == ["g"]
    assert result.code.count("torch.nn.functional.sigmoid") == 1
    skipped, codemod = _run(source, scope=["h"])
    assert isinstance(skipped, TransformSkip)
    assert skipped.skip_description == "f: torch.sigmoid found but outside the patch targets (h); " \
                                       "g: torch.sigmoid found but outside the patch targets (h)"


def test_module_level_code_is_in_scope_only_as_module() -> None:
    source = "import torch\ny = torch.sigmoid(x)\n"
    assert isinstance(_run(source, scope=["<module>"])[0], TransformSuccess)
    assert isinstance(_run(source, scope=["f"])[0], TransformSkip)


def test_declines_say_what_was_missing() -> None:
    no_torch, _ = _run("import numpy\nnumpy.sigmoid(1)\n")
    assert isinstance(no_torch, TransformSkip) and no_torch.skip_description == _Sigmoid.NO_TORCH
    nothing, _ = _run("import torch\ntorch.tanh(1)\n")
    assert isinstance(nothing, TransformSkip) and nothing.skip_description == "no torch.sigmoid call"
    shadowed, _ = _run("import torch\n\ndef f(torch):\n    return torch.sigmoid(1)\n")
    assert isinstance(shadowed, TransformSkip)  # a parameter named torch is not the module
    assert _Sigmoid.precheck("x = 1") == _Sigmoid.NO_TORCH
    assert _Sigmoid.precheck("import torch") == "no torch.sigmoid call"
    assert _Sigmoid.precheck("import torch\ntorch.sigmoid") is None
