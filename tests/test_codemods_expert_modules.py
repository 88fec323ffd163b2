"""An expert class read for inlining on stacked weights: its linear layers (with or without bias), its activation
modules, and what makes it unreadable."""

from __future__ import annotations

import textwrap

import libcst as cst

from bot.patching.codemods.expert_modules import inline_call, read_expert, stack_lines
from bot.patching.symbols import code_of

SOURCE = textwrap.dedent('''
    import torch.nn as nn

    class Expert(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = nn.Linear(d, 4 * d)
            self.act = nn.GELU()
            self.proj = nn.Linear(4 * d, d, bias=False)

        def forward(self, h):
            return self.proj(self.act(self.fc(h)))

    class Layer(nn.Module):
        def __init__(self, d, n):
            super().__init__()
            self.experts = nn.ModuleList([Expert(d) for _ in range(n)])
''')


def test_linears_activations_and_biases_are_read() -> None:
    form = read_expert(cst.parse_module(SOURCE), "Layer", "experts")
    assert not isinstance(form, str)
    assert form.cls == "Expert" and form.param == "h"
    assert form.linears == {"fc": True, "proj": False} and form.activations == {"act": "torch.nn.functional.gelu"}
    inlined = inline_call(form, cst.parse_expression("x[tok]"), "e", {"torch.nn.functional.gelu": "F.gelu"})
    assert code_of(inlined) == "((F.gelu(((x[tok]) @ _grp_fc_w[e] + _grp_fc_b[e]))) @ _grp_proj_w[e])"
    assert stack_lines(form, "experts", {"fc", "proj"}) == [
        "_grp_fc_w = torch.stack([m.fc.weight for m in self.experts]).transpose(1, 2)",
        "_grp_fc_b = torch.stack([m.fc.bias for m in self.experts])",
        "_grp_proj_w = torch.stack([m.proj.weight for m in self.experts]).transpose(1, 2)"]


def test_what_cannot_be_read_says_why() -> None:
    module = cst.parse_module(SOURCE.replace("return self.proj(self.act(self.fc(h)))",
                                             "h = self.fc(h)\n        return self.proj(h)"))
    assert "single `return`" in str(read_expert(module, "Layer", "experts"))
    assert "not built from a class" in str(read_expert(cst.parse_module(SOURCE), "Layer", "blocks"))
